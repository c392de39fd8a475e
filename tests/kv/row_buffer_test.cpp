// RowBuffer (kv/codecs/row_buffer.h): large allocations on 2 MiB boundaries, small ones from
// operator new, contents kept across growth, and geometric growth (one-row appends reallocate O(log
// n) times, not once per append as an exact reserve did).
#include "kv/codecs/row_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "snapkv/util/fp16.h"

namespace snapkv {
namespace {

TEST(RowBuffer, LargeAllocationsSitOnHugePageBoundaries) {
  RowBuffer<fp16_t> big;
  big.reserve(kHugePageBytes / sizeof(fp16_t) + 5);  // just over one huge page
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % kHugePageBytes, 0u);
  big.assign(big.capacity(), fp16_t{7});  // the whole region is writable
  EXPECT_EQ(big.back(), fp16_t{7});
  RowBuffer<fp16_t> small(100, fp16_t{3});
  EXPECT_EQ(small[99], fp16_t{3});
  small.shrink_to_fit();
  EXPECT_EQ(small.size(), 100u);
}

TEST(RowBuffer, OneRowAppendsGrowGeometricallyAndKeepTheRows) {
  constexpr size_t kRow = 128, kRows = 20000;  // 5 MiB of fp16 at the end
  RowBuffer<fp16_t> rows;
  size_t reallocations = 0;
  const fp16_t* where = nullptr;
  for (size_t r = 0; r < kRows; ++r) {
    reserve_for_append(rows, kRow);
    for (size_t c = 0; c < kRow; ++c) rows.push_back(static_cast<fp16_t>((r * 7 + c) & 0x3FFF));
    if (rows.data() != where) {
      ++reallocations;
      where = rows.data();
    }
  }
  // Capacity grows by >= 1/4 each time: log(20000) / log(1.25) < 45 reallocations.
  EXPECT_LT(reallocations, 45u);
  EXPECT_LE(rows.capacity(), rows.size() + rows.size() / 4 + kRow);
  for (size_t r = 0; r < kRows; r += 997) {
    for (size_t c = 0; c < kRow; ++c) {
      ASSERT_EQ(rows[r * kRow + c], static_cast<fp16_t>((r * 7 + c) & 0x3FFF)) << r << " " << c;
    }
  }
}

}  // namespace
}  // namespace snapkv
