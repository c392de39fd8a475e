// Read-only memory maps of files, and what happens when such a file shrinks under the map.
//
// Promises: map_file_readonly() maps a regular file (never blocks on a FIFO or device: the path is
// checked with stat() before it is opened, and opened with O_NONBLOCK) with a read-only private
// mapping, and registers the range under the file's path. A file of 2 MiB or more is mapped at a
// 2 MiB-aligned address advised MADV_HUGEPAGE: where the page cache holds it in 2 MiB folios
// (Linux with large folios on the file system: the kernel makes them when such a map first faults
// the file in) every 2 MiB is one TLB entry instead of 512, for weights streamed once per token. If
// the file is truncated while mapped, touching a page past its new end raises SIGBUS;
// install_mapped_file_fault_handler() turns that signal, when it falls inside a registered range,
// into the message
//   "snapkv: error: [mmap] file 'PATH' was truncated or replaced while in use, got a bus error at
//   byte N of M, expected the file to stay unchanged while it is mapped"
// on stderr and exit status 1 (a runtime error, as for any other bad file). A SIGBUS outside every
// registered range is re-raised with the default action (a genuine bug still crashes).
//
// Leaves out: recovering from the fault (the data is gone; there is nothing valid to continue
// with). Installing a signal handler is the application's decision: the library registers ranges
// but never installs the handler itself; the `snapkv` command installs it in main(). Up to
// kMaxMappedFiles maps are registered at once; more still work, without the named message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace snapkv {

inline constexpr size_t kMaxMappedFiles = 64;

// A read-only mapping of a whole regular file; move-only, unmaps (and unregisters) on destruction.
class MappedFile {
 public:
  MappedFile() = default;
  // Throws snapkv::RuntimeError "[component] cannot open file 'PATH', got <reason>, expected
  // <what>" when the path is missing, unreadable, not a regular file (FIFO, directory, device) or
  // cannot be mapped. An empty file gives data() == nullptr and size() == 0.
  static MappedFile open(const std::string& path, std::string_view component,
                         std::string_view expected_what);
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return static_cast<const uint8_t*>(addr_); }
  size_t size() const { return size_; }

 private:
  void reset();
  void* addr_ = nullptr;
  size_t size_ = 0;
  int slot_ = -1;  // registry slot, -1 when not registered
};

// Installs the SIGBUS handler described above (idempotent, thread-safe). Call it early in main().
void install_mapped_file_fault_handler();

// Throws snapkv::RuntimeError "[component] cannot read 'PATH', got not a regular file (a FIFO),
// expected <expected_what>" unless `path` names an existing regular file (symlinks followed). Use
// before opening any input whose open() could block (FIFOs) or whose read would be meaningless
// (directories).
void require_regular_file(const std::string& path, std::string_view component,
                          std::string_view expected_what);
// The reason `path` is not an existing regular file ("No such file or directory", "not a regular
// file (a FIFO)", ...), or an empty string when it is one. For callers with their own message form.
std::string regular_file_problem(const std::string& path);

}  // namespace snapkv
