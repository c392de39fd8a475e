// Tests of the .npy reader/writer: round trips, byte-exact agreement with NumPy's own output, the
// three format versions, and every malformed input the reader must refuse with a clear message.
#include "snapkv/util/npy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {

// The 2x3 array NumPy 1.24 writes with np.save(np.array([[0, 1.5, -2], [3.25, 1e-3, -7]], '<f4')).
const std::vector<float> kValues = {0.0f, 1.5f, -2.0f, 3.25f, 1e-3f, -7.0f};
const std::vector<size_t> kShape = {2, 3};

// A .npy image by hand: preamble for `major`.0, the header text as given (no padding added).
std::vector<uint8_t> image(uint8_t major, const std::string& header, const void* data,
                           size_t data_bytes, uint8_t minor = 0) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', major, minor};
  const size_t len_bytes = major == 1 ? 2 : 4;
  size_t len = header.size();
  for (size_t i = 0; i < len_bytes; ++i, len >>= 8) out.push_back(static_cast<uint8_t>(len & 0xff));
  // memcpy rather than vector::insert: GCC 12 at -O3 -march=native (AVX-512) reports a false
  // -Wstringop-overflow inside the inlined range insert.
  const size_t at = out.size();
  out.resize(at + header.size() + data_bytes);
  if (!header.empty()) std::memcpy(out.data() + at, header.data(), header.size());
  if (data_bytes > 0) std::memcpy(out.data() + at + header.size(), data, data_bytes);
  return out;
}

std::vector<uint8_t> image(const std::string& header, uint8_t major = 1) {
  return image(major, header, kValues.data(), kValues.size() * sizeof(float));
}

// NumPy's header for kShape, padded so that preamble (10) + header is 128 bytes.
std::string numpy_header_2x3() {
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  h.append(128 - 10 - h.size() - 1, ' ');
  return h + "\n";
}

// Runs decode_npy and returns the error message ("" when it did not throw RuntimeError).
std::string decode_error(const std::vector<uint8_t>& bytes, size_t rank = kNpyAnyRank) {
  try {
    decode_npy(bytes, "t.npy", rank);
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "";
}

// Every part must occur in the message.
#define EXPECT_ERROR_HAS(msg, ...)                                          \
  do {                                                                      \
    const std::string m_ = (msg);                                           \
    for (const std::string& part : std::vector<std::string>{__VA_ARGS__}) { \
      EXPECT_NE(m_.find(part), std::string::npos)                           \
          << "message '" << m_ << "' lacks '" << part << "'";               \
    }                                                                       \
  } while (0)

TEST(Npy, EncodeMatchesNumpyBytes) {
  const std::vector<uint8_t> ours = encode_npy(kValues, kShape);
  const std::vector<uint8_t> numpy = image(numpy_header_2x3());
  ASSERT_EQ(ours.size(), 152u);  // NumPy's file is 152 bytes
  EXPECT_EQ(ours, numpy);
}

TEST(Npy, DecodesAllThreeVersions) {
  for (const uint8_t major : {uint8_t{1}, uint8_t{2}, uint8_t{3}}) {
    // v2/v3 preambles are 12 bytes; NumPy pads the header to keep the data 64-aligned.
    std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    const size_t preamble = major == 1 ? 10 : 12;
    h.append(128 - preamble - h.size() - 1, ' ');
    h += '\n';
    const NpyArray a = decode_npy(image(h, major), "v.npy", 2);
    EXPECT_EQ(a.shape, kShape) << "version " << int(major);
    EXPECT_EQ(a.data, kValues) << "version " << int(major);
  }
}

TEST(Npy, HeaderVariantsAccepted) {
  // key order, double quotes, no trailing comma, extra spaces, Python 2 long suffix
  for (const std::string h : {
           "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}\n",
           "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,3)}",
           "  { 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 2 , 3 , ) , }  \n",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }\n",
       }) {
    const NpyArray a = decode_npy(image(h), "h.npy");
    EXPECT_EQ(a.shape, kShape) << h;
    EXPECT_EQ(a.data, kValues) << h;
  }
}

TEST(Npy, RoundTripThroughFilesKeepsBitsAndShapes) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path =
      (dir / ("snapkv_npy_test_" + std::to_string(::getpid()) + ".npy")).string();
  struct Case {
    std::vector<size_t> shape;
  };
  for (const Case& c :
       {Case{{}}, Case{{7}}, Case{{2, 5, 3}}, Case{{3, 0, 4}}, Case{{1, 1, 1, 1, 2}}}) {
    size_t n = 1;
    for (size_t d : c.shape) n *= d;
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i)
      values[i] = std::ldexp(static_cast<float>(i) - 3.5f, int(i % 7) - 3);
    if (n > 2) values[1] = -0.0f, values[2] = 1e-40f;  // sign of zero and a subnormal survive
    write_npy(path, values, c.shape);
    const NpyArray a = read_npy(path);
    EXPECT_EQ(a.shape, c.shape);
    ASSERT_EQ(a.data.size(), n);
    if (n) {
      EXPECT_EQ(std::memcmp(a.data.data(), values.data(), n * sizeof(float)), 0);
    }
    EXPECT_EQ(a.numel(), n);

    // data starts at a multiple of 64, header ends with '\n'
    const std::vector<uint8_t> bytes = encode_npy(values, c.shape);
    const size_t header_len = bytes[8] | (size_t{bytes[9]} << 8);
    EXPECT_EQ((10 + header_len) % 64, 0u);
    EXPECT_EQ(bytes[10 + header_len - 1], '\n');
  }
  std::filesystem::remove(path);
}

TEST(Npy, LongHeaderSwitchesToVersion2) {
  const std::vector<float> one = {2.5f};
  const std::vector<size_t> short_shape(64, 1);
  EXPECT_EQ(encode_npy(one, short_shape)[6], 1);  // header fits in 65535 bytes: version 1.0
  EXPECT_EQ(decode_npy(encode_npy(one, short_shape), "wide.npy", 64).data, one);
  // 30000 dimensions of 1 make a ~90 KB header: version 2.0 with a u32 length, still 64-aligned.
  const std::vector<size_t> long_shape(30000, 1);
  const std::vector<uint8_t> b = encode_npy(one, long_shape);
  ASSERT_EQ(b[6], 2);
  const size_t header_len =
      b[8] | (size_t{b[9]} << 8) | (size_t{b[10]} << 16) | (size_t{b[11]} << 24);
  EXPECT_GT(header_len, 65535u);
  EXPECT_EQ((12 + header_len) % 64, 0u);
  EXPECT_EQ(b.size(), 12 + header_len + sizeof(float));
  // The reader caps the rank at 64 (NumPy's own limit is 32 or 64).
  EXPECT_ERROR_HAS(decode_error(b), "malformed header", "at most 64 dimensions");
}

TEST(Npy, EncodeRejectsSizeMismatch) {
  const std::vector<size_t> shape = {2, 2};
  EXPECT_THROW(encode_npy(kValues, shape), std::invalid_argument);
}

TEST(Npy, RejectsBadMagic) {
  std::vector<uint8_t> b = image(numpy_header_2x3());
  b[1] = 'X';
  EXPECT_ERROR_HAS(decode_error(b), "[npy] t.npy: not a .npy file", "\\x93XUMPY", "\\x93NUMPY");
}

TEST(Npy, RejectsUnknownVersion) {
  const std::vector<uint8_t> b = image(4, numpy_header_2x3(), kValues.data(), 24);
  EXPECT_ERROR_HAS(decode_error(b), "version", "got 4.0", "1.0, 2.0 or 3.0");
  const std::vector<uint8_t> c = image(1, numpy_header_2x3(), kValues.data(), 24, 1);
  EXPECT_ERROR_HAS(decode_error(c), "version", "got 1.1");
}

TEST(Npy, RejectsOtherDtypesNamingThem) {
  for (const std::string dtype : {"<f8", ">f4", "<f2", "<i4", "|u1", "|b1"}) {
    const std::string h = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': (2, 3), }\n";
    EXPECT_ERROR_HAS(decode_error(image(h)), "[npy] t.npy: dtype not supported",
                     "got '" + dtype + "'", "expected '<f4'");
  }
  const std::string structured =
      "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }";
  EXPECT_ERROR_HAS(decode_error(image(structured)), "dtype not supported", "structured");
}

TEST(Npy, RejectsFortranOrder) {
  const std::string h = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n";
  EXPECT_ERROR_HAS(decode_error(image(h)), "fortran_order", "got True", "C order");
}

TEST(Npy, RejectsWrongRankWithCallersExpectation) {
  const std::string m = decode_error(image(numpy_header_2x3()), 3);
  EXPECT_ERROR_HAS(m, "wrong rank", "got 2 (shape (2, 3))", "expected 3");
  EXPECT_EQ(decode_error(image(numpy_header_2x3()), 2), "");
}

TEST(Npy, RejectsTruncatedAndTrailingData) {
  const std::string h = numpy_header_2x3();
  EXPECT_ERROR_HAS(decode_error(image(1, h, kValues.data(), 23)), "truncated data", "got 23 bytes",
                   "24 bytes for shape (2, 3)");
  EXPECT_ERROR_HAS(decode_error(image(1, h, kValues.data(), 0)), "truncated data", "got 0 bytes");
  std::vector<float> more = kValues;
  more.push_back(1.0f);
  EXPECT_ERROR_HAS(decode_error(image(1, h, more.data(), 28)), "trailing bytes", "got 28 bytes");
}

TEST(Npy, RejectsAbsurdShapes) {
  // Product overflows 64 bits, a single dimension over 2^64, and a large-but-representable shape
  // whose data is simply absent (must fail on size, never allocate).
  EXPECT_ERROR_HAS(
      decode_error(image(
          "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }")),
      "shape too large", "(4294967296, 4294967296, 16)");
  EXPECT_ERROR_HAS(
      decode_error(
          image("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }")),
      "does not fit in 64 bits");
  EXPECT_ERROR_HAS(decode_error(image(
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000), }")),
                   "truncated data", "4000000000000 bytes");
}

TEST(Npy, RejectsMalformedHeadersAndPreambles) {
  EXPECT_ERROR_HAS(decode_error({0x93, 'N', 'U', 'M'}), "file too short", "got 4 bytes");
  EXPECT_ERROR_HAS(decode_error({0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0}), "too short",
                   "version 2/3");
  // header length pointing past the end of the file
  std::vector<uint8_t> b = image(numpy_header_2x3());
  b[8] = 0xff;
  b[9] = 0x7f;
  EXPECT_ERROR_HAS(decode_error(b), "header runs past the end", "got 32767 header bytes");
  // v2 length field far beyond the cap
  std::vector<uint8_t> c = image(numpy_header_2x3(), 2);
  c[11] = 0x7f;
  EXPECT_ERROR_HAS(decode_error(c), "header length too large");
  for (const std::string h : {
           "not a dict",
           "{'descr': '<f4', 'fortran_order': False}",                         // no shape
           "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3)}",        // bad bool
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}",       // negative dim
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} extra",  // trailing text
           "{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}",         // broken quote
       }) {
    SCOPED_TRACE(h);
    EXPECT_ERROR_HAS(decode_error(image(h)), "malformed header");
  }
  EXPECT_ERROR_HAS(
      decode_error(image("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}")),
      "unknown header key", "'x'");
}

TEST(Npy, ReadNpyReportsMissingFileAndChecksRealFiles) {
  try {
    read_npy("/nonexistent/dir/K.npy", 3);
    FAIL() << "no exception";
  } catch (const RuntimeError& e) {
    EXPECT_ERROR_HAS(std::string(e.what()), "[npy] /nonexistent/dir/K.npy: cannot open file");
  }
  // The file path of read_npy runs the same checks as decode_npy (truncated file on disk).
  const auto path = std::filesystem::temp_directory_path() /
                    ("snapkv_npy_trunc_" + std::to_string(::getpid()) + ".npy");
  const std::vector<uint8_t> b = image(1, numpy_header_2x3(), kValues.data(), 20);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), long(b.size()));
  try {
    read_npy(path.string(), 2);
    FAIL() << "no exception";
  } catch (const RuntimeError& e) {
    EXPECT_ERROR_HAS(std::string(e.what()), "truncated data", "got 20 bytes");
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace snapkv
