// Progress of reading a whole file into memory, for callers several layers above the read.
//
//   snapkv::ReadProgressScope scope([&](size_t done, size_t total) { bar.update(done, total); });
//   const LlamaModel model = LlamaModel::load(path);  // SNAPKV_WEIGHTS=huge: reports as it reads
//
// Promises: while a ReadProgressScope lives on a thread, the whole-file reads of that thread
// (util's read_file_to_huge_pages: gguf::File's huge_page_copy storage) call its function after
// every chunk of at most kReadProgressChunk bytes with (bytes read so far, file bytes), the last
// call with done == total; scopes nest (the innermost reports, the outer one is restored). Other
// threads are never called.
// Leaves out: memory-mapped opens (nothing is read up front: pages are read on first touch, inside
// the first forward pass), and any drawing (the caller's).
#pragma once

#include <cstddef>
#include <functional>

namespace snapkv {

inline constexpr size_t kReadProgressChunk = size_t{64} << 20;  // 64 MiB

using ReadProgressFn = std::function<void(size_t done, size_t total)>;

class ReadProgressScope {
 public:
  explicit ReadProgressScope(ReadProgressFn fn);
  ~ReadProgressScope();
  ReadProgressScope(const ReadProgressScope&) = delete;
  ReadProgressScope& operator=(const ReadProgressScope&) = delete;

 private:
  ReadProgressFn fn_;
  const ReadProgressFn* previous_;
};

// Calls the innermost scope's function of this thread, if any (the readers call it).
void report_read_progress(size_t done, size_t total);

}  // namespace snapkv
