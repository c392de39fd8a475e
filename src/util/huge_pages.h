// Anonymous memory on 2 MiB boundaries advised for transparent huge pages, for data that is
// streamed over and over: a KV store's rows (kv/codecs/row_buffer.h) and a model's weights
// (gguf::File's huge_page_copy storage, read once from the file by read_file_to_huge_pages).
//
// Promises: huge_page_map() returns a region aligned to kHugePageBytes and advised MADV_HUGEPAGE,
// so where THP is "always" or "madvise" the kernel backs it with 2 MiB pages and a pass over
// 1 GiB crosses 512 pages instead of 262144 (fewer TLB walks; each walk is two-dimensional under
// a hypervisor). HugePageRegion owns such a region; read_file_to_huge_pages fills one with a whole
// regular file through pread (no file mapping: the copy is the process's only resident copy, so
// the peak RSS is that of a fully touched map of the file, plus at most one huge page of
// rounding). Leaves out: any promise that huge pages are granted (the kernel decides; elsewhere
// the advice is a no-op and the region has 4 KiB pages), NUMA placement. Private to src/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace snapkv {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` rounded up to whole huge pages.
inline size_t huge_page_round_up(size_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

// A writable region of `bytes` (a multiple of kHugePageBytes, > 0) at a kHugePageBytes boundary,
// advised MADV_HUGEPAGE; throws std::bad_alloc when the kernel refuses. Release with munmap.
void* huge_page_map(size_t bytes);

// False when the environment sets SNAPKV_HUGEPAGES=0 (read once): RowBuffer then takes every
// request from operator new, to compare against the plain allocation.
bool huge_pages_enabled();

// A move-only owner of one huge_page_map region; empty (data() == nullptr) for 0 bytes.
class HugePageRegion {
 public:
  HugePageRegion() = default;
  // size() == bytes; the mapping itself is rounded up to whole huge pages.
  static HugePageRegion allocate(size_t bytes);
  HugePageRegion(HugePageRegion&& o) noexcept;
  HugePageRegion& operator=(HugePageRegion&& o) noexcept;
  HugePageRegion(const HugePageRegion&) = delete;
  HugePageRegion& operator=(const HugePageRegion&) = delete;
  ~HugePageRegion();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Makes the region read-only (mprotect): later writes fault, as in a read-only file map.
  void protect_read_only();

 private:
  void reset();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The whole regular file at `path`, read into a HugePageRegion. Throws snapkv::RuntimeError
// "[component] cannot open file 'PATH', got <reason>, expected <expected_what>" when the path is
// missing, unreadable or not a regular file, and "[component] cannot read file 'PATH' ..." when a
// read fails or the file shrinks while it is read.
HugePageRegion read_file_to_huge_pages(const std::string& path, std::string_view component,
                                       std::string_view expected_what);

// Bytes of the calling process backed by anonymous huge pages (AnonHugePages in
// /proc/self/smaps_rollup), or -1 where the kernel does not report it. For logs and tests.
long long anon_huge_page_bytes();

}  // namespace snapkv
