// Read-only file maps, their registry and the SIGBUS handler that names a truncated file.
//
// The registry is a fixed table of slots so that the signal handler can read it without locks or
// allocation: a slot is claimed with a compare-exchange on `state`, filled, then published with a
// release store of `begin`; the handler reads `begin` with acquire and only then the rest.
#include "snapkv/util/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {

constexpr size_t kMaxPathBytes = 512;

struct Slot {
  std::atomic<int> state{0};        // 0 free, 1 claimed
  std::atomic<uintptr_t> begin{0};  // 0 while not published
  std::atomic<size_t> length{0};
  char path[kMaxPathBytes] = {};
};

Slot g_slots[kMaxMappedFiles];

int register_range(const void* addr, size_t length, const std::string& path) {
  for (size_t i = 0; i < kMaxMappedFiles; ++i) {
    int expected = 0;
    if (!g_slots[i].state.compare_exchange_strong(expected, 1)) continue;
    Slot& s = g_slots[i];
    const size_t n = std::min(path.size(), kMaxPathBytes - 1);
    std::memcpy(s.path, path.data(), n);
    s.path[n] = '\0';
    s.length.store(length, std::memory_order_relaxed);
    s.begin.store(reinterpret_cast<uintptr_t>(addr), std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;  // table full: the map works, a fault in it is reported without a name
}

void unregister_range(int slot) {
  if (slot < 0) return;
  Slot& s = g_slots[static_cast<size_t>(slot)];
  s.begin.store(0, std::memory_order_release);
  s.state.store(0, std::memory_order_release);
}

// Async-signal-safe output helpers (write(2) only).
void put(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void put_u64(uint64_t v) {
  char buf[24];
  char* p = buf + sizeof(buf);
  *--p = '\0';
  do {
    *--p = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  put(p);
}

void on_sigbus(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  // si_code <= 0: sent by kill()/raise(), no faulting address; fall through to the default.
  for (Slot& s : g_slots) {
    if (info->si_code <= 0) break;
    const uintptr_t begin = s.begin.load(std::memory_order_acquire);
    if (begin == 0) continue;
    const size_t length = s.length.load(std::memory_order_relaxed);
    if (addr < begin || addr - begin >= length) continue;
    put("snapkv: error: [mmap] file '");
    put(s.path);
    put("' was truncated or replaced while in use, got a bus error at byte ");
    put_u64(addr - begin);
    put(" of ");
    put_u64(length);
    put(", expected the file to stay unchanged while it is mapped\n");
    ::_exit(1);
  }
  // Not one of our maps: a genuine bug. Crash as SIGBUS would have without us.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

[[noreturn]] void fail_open(const std::string& path, std::string_view component,
                            std::string_view reason, std::string_view expected_what) {
  throw_runtime(component, "cannot open file '" + path + "'", reason, expected_what);
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "not a regular file (a directory)";
  if (S_ISFIFO(mode)) return "not a regular file (a FIFO)";
  if (S_ISCHR(mode)) return "not a regular file (a character device)";
  if (S_ISBLK(mode)) return "not a regular file (a block device)";
  if (S_ISSOCK(mode)) return "not a regular file (a socket)";
  return "not a regular file";
}

constexpr size_t kHugePageBytes = size_t{2} << 20;

// A read-only private map of the whole file at a 2 MiB-aligned address, advised MADV_HUGEPAGE:
// file offset and address then agree modulo 2 MiB, so where the page cache holds the file in
// 2 MiB folios (the kernel makes them when such an advised map faults the file in) each 2 MiB is
// mapped by one page-table entry, one TLB entry for a stream that crosses it, instead of 512.
// Elsewhere (a file cached earlier in small folios, a kernel or file system without large folios)
// it is an ordinary map. MAP_FAILED on failure, with errno set.
void* map_at_huge_page_boundary(int fd, size_t size) {
  if (size < kHugePageBytes) return ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  // Reserve size + 2 MiB of address space, place the map at its first 2 MiB boundary, give back
  // the rest of the reservation.
  const size_t padded = size + kHugePageBytes;
  void* raw =
      ::mmap(nullptr, padded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const auto begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  void* addr =
      ::mmap(reinterpret_cast<void*>(aligned), size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (addr == MAP_FAILED) {
    const int err = errno;
    ::munmap(raw, padded);
    errno = err;
    return MAP_FAILED;
  }
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const size_t tail = padded - (aligned - begin) - size;
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + size), tail);
#ifdef MADV_HUGEPAGE
  ::madvise(addr, size, MADV_HUGEPAGE);  // advice only
#endif
  return addr;
}

}  // namespace

std::string regular_file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return file_kind(st.st_mode);
  return "";
}

void require_regular_file(const std::string& path, std::string_view component,
                          std::string_view expected_what) {
  const std::string problem = regular_file_problem(path);
  if (!problem.empty()) fail_open(path, component, problem, expected_what);
}

MappedFile MappedFile::open(const std::string& path, std::string_view component,
                            std::string_view expected_what) {
  // stat first: open() on a FIFO without a writer blocks; O_NONBLOCK covers a swap in between.
  require_regular_file(path, component, expected_what);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail_open(path, component, std::strerror(errno), expected_what);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    fail_open(path, component, S_ISREG(st.st_mode) ? std::strerror(err) : file_kind(st.st_mode),
              expected_what);
  }
  MappedFile m;
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ > 0) {
    void* addr = map_at_huge_page_boundary(fd, m.size_);
    if (addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw_runtime(component, "cannot memory-map file '" + path + "'", std::strerror(err),
                    expected_what);
    }
    m.addr_ = addr;
    m.slot_ = register_range(addr, m.size_, path);
  }
  ::close(fd);  // the mapping stays valid
  return m;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : addr_(std::exchange(o.addr_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      slot_(std::exchange(o.slot_, -1)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    addr_ = std::exchange(o.addr_, nullptr);
    size_ = std::exchange(o.size_, 0);
    slot_ = std::exchange(o.slot_, -1);
  }
  return *this;
}

MappedFile::~MappedFile() {
  reset();
}

void MappedFile::reset() {
  unregister_range(slot_);
  slot_ = -1;
  if (addr_ != nullptr) ::munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

void install_mapped_file_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
  });
}

}  // namespace snapkv
