// Huge-page regions (util/huge_pages.h): the aligned, advised anonymous map, its owner, and a
// whole-file read into one.
#include "util/huge_pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <utility>

#include "snapkv/util/error.h"
#include "snapkv/util/mapped_file.h"
#include "snapkv/util/read_progress.h"

namespace snapkv {

void* huge_page_map(size_t bytes) {
  if (bytes == 0 || bytes % kHugePageBytes != 0) throw std::bad_alloc();
  const size_t padded = bytes + kHugePageBytes;
  void* raw = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  // Give back the unaligned head and the tail beyond the region.
  if (aligned > begin) munmap(raw, aligned - begin);
  const size_t tail = padded - (aligned - begin) - bytes;
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  void* region = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  madvise(region, bytes, MADV_HUGEPAGE);  // advice only: failure leaves 4 KiB pages
#endif
  return region;
}

bool huge_pages_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("SNAPKV_HUGEPAGES");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return enabled;
}

HugePageRegion HugePageRegion::allocate(size_t bytes) {
  HugePageRegion r;
  if (bytes == 0) return r;
  r.data_ = static_cast<uint8_t*>(huge_page_map(huge_page_round_up(bytes)));
  r.size_ = bytes;
  return r;
}

HugePageRegion::HugePageRegion(HugePageRegion&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

HugePageRegion& HugePageRegion::operator=(HugePageRegion&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

HugePageRegion::~HugePageRegion() {
  reset();
}

void HugePageRegion::reset() {
  if (data_ != nullptr) munmap(data_, huge_page_round_up(size_));
  data_ = nullptr;
  size_ = 0;
}

void HugePageRegion::protect_read_only() {
  if (data_ != nullptr) mprotect(data_, huge_page_round_up(size_), PROT_READ);
}

HugePageRegion read_file_to_huge_pages(const std::string& path, std::string_view component,
                                       std::string_view expected_what) {
  // As MappedFile::open: stat first (open() on a FIFO without a writer blocks), O_NONBLOCK for a
  // swap in between, fstat on the descriptor.
  require_regular_file(path, component, expected_what);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw_runtime(component, "cannot open file '" + path + "'", std::strerror(errno),
                  expected_what);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string reason = S_ISREG(st.st_mode) ? std::strerror(errno) : "not a regular file";
    ::close(fd);
    throw_runtime(component, "cannot open file '" + path + "'", reason, expected_what);
  }
  const auto size = static_cast<size_t>(st.st_size);
  HugePageRegion region;
  try {
    region = HugePageRegion::allocate(size);
  } catch (const std::bad_alloc&) {
    ::close(fd);
    throw_runtime(component, "cannot allocate memory for file '" + path + "'",
                  std::to_string(size) + " bytes refused", "memory for the whole file");
  }
  size_t done = 0;
  while (done < size) {
    const size_t chunk = std::min(size - done, kReadProgressChunk);
    const ssize_t n = ::pread(fd, region.data() + done, chunk, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = n < 0 ? std::string(std::strerror(errno))
                                       : "end of file after " + std::to_string(done) + " of " +
                                             std::to_string(size) +
                                             " bytes (the file shrank while it was read)";
      ::close(fd);
      throw_runtime(component, "cannot read file '" + path + "'", reason, expected_what);
    }
    done += static_cast<size_t>(n);
    report_read_progress(done, size);
  }
  ::close(fd);
  region.protect_read_only();
  return region;
}

long long anon_huge_page_bytes() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  long long kib = 0;
  while (in >> key) {
    if (key == "AnonHugePages:" && (in >> kib)) return kib * 1024;
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

}  // namespace snapkv
