// Storage for a store's long row arrays (Fp16RowStore's rows): a std::vector whose large
// allocations sit on 2 MiB boundaries advised MADV_HUGEPAGE, grown geometrically.
//
// Promises: HugePageAllocator<T> hands out requests of kHugePageBytes or more as anonymous mmap
// regions aligned to kHugePageBytes and advised for transparent huge pages (the kernel backs them
// with 2 MiB pages where THP is "always" or "madvise"; elsewhere the advice is a no-op), so decode
// attention streaming 16 MiB of one head's rows crosses 8 pages instead of 4096 (fewer TLB
// walks). Smaller requests, and all of them with SNAPKV_HUGEPAGES=0, go to operator new. (Huge
// pages pay off only together with the row kernels' software prefetch, kernels/fp16_rows.h;
// compare the two together.) reserve_for_append grows
// capacity by at least a quarter, so appending one row per decode step copies the rows O(log n)
// times, not once per step. Leaves out: NUMA placement, and any promise that huge pages are granted
// (the kernel decides). The mapping itself is util/huge_pages.h's. Private to kv/.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "util/huge_pages.h"

namespace snapkv {

template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  // Bytes a request of n elements occupies: rounded up to whole huge pages when large.
  static size_t mapped_bytes(size_t n) { return huge_page_round_up(n * sizeof(T)); }
  static bool mapped(size_t n) { return n * sizeof(T) >= kHugePageBytes && huge_pages_enabled(); }
  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    if (!mapped(n)) return static_cast<T*>(::operator new(n * sizeof(T)));
    return static_cast<T*>(huge_page_map(mapped_bytes(n)));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (!mapped(n)) {
      ::operator delete(p);
      return;
    }
    munmap(p, mapped_bytes(n));
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using RowBuffer = std::vector<T, HugePageAllocator<T>>;

// Makes room for `extra` more elements: capacity grows to at least 5/4 of what it was, so a long
// run of small appends reallocates (and copies) O(log n) times.
template <class T>
void reserve_for_append(RowBuffer<T>& v, size_t extra) {
  const size_t need = v.size() + extra;
  if (need <= v.capacity()) return;
  v.reserve(std::max(need, v.capacity() + v.capacity() / 4));
}

}  // namespace snapkv
