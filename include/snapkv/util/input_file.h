// Reading a file that is read once, start to end (a prompt, a questions list, a text to tokenize):
// regular files, pipes, FIFOs and character devices, or standard input for "-", never blocking
// forever.
//
// Promises:
//  - "-" reads standard input to its end (an empty or closed pipe ends at once; a terminal is
//    read until end of file, as the user types it);
//  - a named path is checked with stat() first: a directory, a block device or a socket is refused
//    by name; anything else is opened non-blocking, so opening a FIFO never waits;
//  - a FIFO or device that has no writer, or gives no byte, within kInputFirstByteWait ends as an
//    empty input; once bytes came, a pause longer than kInputIdleWait is an error naming the path;
//  - at most max_bytes + 1 bytes are read: a longer input comes back with max_bytes + 1 bytes, so
//    the caller can refuse it without reading an endless source (/dev/zero) to its end.
// Leaves out: decoding (the bytes come back as they are) and files that are mapped (GGUF, .kvc:
// util/mapped_file.h, which refuses anything but a regular file).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace snapkv {

inline constexpr int kInputFirstByteWaitMs = 3000;
inline constexpr int kInputIdleWaitMs = 30000;

// Throws snapkv::RuntimeError "[component] cannot read the <what> ..." naming the path.
std::string read_input_file(const std::string& path, std::string_view component,
                            std::string_view what, size_t max_bytes);

}  // namespace snapkv
