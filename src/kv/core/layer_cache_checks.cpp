// LayerCache's input checks (kv/core/layer_cache_checks.h).
#include "kv/core/layer_cache_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "snapkv/util/error.h"
#include "snapkv/util/fp16.h"
#include "snapkv/util/parallel.h"

namespace snapkv::layer_cache_checks {

void check_tensor(const Tensor3& t, const char* name, size_t dim0, const char* dim0_name,
                  size_t head_dim) {
  if (t.dim0 != dim0) {
    throw_invalid(kComponent, std::string(name) + " head count", num(t.dim0),
                  std::string(dim0_name) + " = " + num(dim0));
  }
  if (t.dim2 != head_dim) {
    throw_invalid(kComponent, std::string(name) + " head_dim", num(t.dim2),
                  "head_dim = " + num(head_dim));
  }
  if (t.dim1 == 0) {
    throw_invalid(kComponent, std::string(name) + " has no tokens", "S = 0", "S >= 1");
  }
  if (t.data == nullptr)
    throw_invalid(kComponent, std::string(name) + " data", "null", "a pointer");
}

// Every value finite; for k and v (rows the cache stores, in fp16 or a codec built on fp16 ranges)
// also within the binary16 range, so a key that fits fp32 but not fp16 is the same named error for
// every codec instead of an infinity that turns scores into zeros or NaN.
void check_values(const Tensor3& t, const char* name, bool stored_in_fp16) {
  const size_t n = t.dim0 * t.dim1 * t.dim2;
  const float limit = stored_in_fp16 ? kFp16Max : std::numeric_limits<float>::max();
  // Slices scanned without an early exit (a loop the compiler vectorises), spread over the workers
  // when large (a 64K-token chunk is 2 x 256 MiB of k and v); the walk that names the first bad
  // value starts at the first slice holding one.
  // |x| <= limit compared on the bits: with the sign cleared, a float's bits order like its
  // magnitude as a non-negative int32, and Inf and NaN sit above every finite value (SSE2 pcmpgtd).
  int32_t limit_bits = 0;
  std::memcpy(&limit_bits, &limit, sizeof limit_bits);
  const auto has_bad = [&](size_t begin, size_t end) {
    int32_t bad = 0;
    for (size_t j = begin; j < end; ++j) {
      uint32_t bits = 0;
      std::memcpy(&bits, t.data + j, sizeof bits);
      bad |= static_cast<int32_t>(bits & 0x7fffffffu) > limit_bits ? 1 : 0;
    }
    return bad != 0;
  };
  constexpr size_t kSlice = size_t{1} << 16;
  const size_t n_slices = (n + kSlice - 1) / kSlice;
  size_t i = n;
  if (n_slices <= 1) {
    if (has_bad(0, n)) i = 0;
  } else {
    std::vector<uint8_t> bad(n_slices, 0);
    parallel_for(n_slices,
                 [&](size_t s) { bad[s] = has_bad(s * kSlice, std::min(n, (s + 1) * kSlice)); });
    const auto first = std::find(bad.begin(), bad.end(), uint8_t{1});
    if (first != bad.end()) i = static_cast<size_t>(first - bad.begin()) * kSlice;
  }
  for (; i < n; ++i) {
    if (!(std::fabs(t.data[i]) <= limit)) {  // also catches NaN
      const size_t row = i / t.dim2;
      const bool finite = std::isfinite(t.data[i]);
      throw_invalid(
          kComponent,
          std::string(name) + " holds " +
              (finite ? "a value outside the fp16 range" : "a non-finite value") + " at [" +
              num(row / t.dim1) + "][" + num(row % t.dim1) + "][" + num(i % t.dim2) + "]",
          std::to_string(t.data[i]),
          stored_in_fp16 ? "finite values with |x| <= 65504 (stored rows are fp16; NaN/Inf "
                           "are rejected)"
                         : "finite values (NaN/Inf are rejected)");
    }
  }
}
}  // namespace snapkv::layer_cache_checks
