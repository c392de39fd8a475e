// Bounded reads of files read once (snapkv/util/input_file.h).
#include "snapkv/util/input_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {

const char* refused_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return nullptr;
}

// Reads fd (non-blocking unless `blocking`) until end of file or max_bytes + 1 bytes.
std::string read_fd(int fd, bool blocking, const std::string& name, std::string_view component,
                    std::string_view what, size_t max_bytes) {
  std::string text;
  char buf[1 << 16];
  bool got_bytes = false;
  while (text.size() <= max_bytes) {
    int ready = 1;
    if (!blocking) {
      pollfd p{fd, POLLIN, 0};
      ready = ::poll(&p, 1, got_bytes ? kInputIdleWaitMs : kInputFirstByteWaitMs);
      if (ready < 0 && errno == EINTR) continue;
    }
    const size_t want = std::min(sizeof buf, max_bytes + 1 - text.size());
    const ssize_t n = ::read(fd, buf, want);
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
      got_bytes = true;
      continue;
    }
    if (n == 0) break;  // end of file, or a FIFO that never had a writer
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (ready == 0) {
        throw_runtime(
            component, "no data from the " + std::string(what), name,
            "bytes or end of file within " +
                std::to_string((got_bytes ? kInputIdleWaitMs : kInputFirstByteWaitMs) / 1000) +
                " s (a writer that closes the FIFO when done)");
      }
      continue;
    }
    throw_runtime(component, "cannot read the " + std::string(what),
                  name + ": " + std::strerror(errno), "a readable file");
  }
  return text;
}

}  // namespace

std::string read_input_file(const std::string& path, std::string_view component,
                            std::string_view what, size_t max_bytes) {
  if (path.empty()) {
    throw_invalid(component, std::string(what) + " path is empty", "''", "a path or - (stdin)");
  }
  if (path == "-") {
    return read_fd(STDIN_FILENO, true, "- (standard input)", component, what, max_bytes);
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw_runtime(component, "cannot read the " + std::string(what),
                  path + ": " + std::strerror(errno), "an existing readable file");
  }
  if (const char* kind = refused_kind(st.st_mode)) {
    throw_runtime(component, "cannot read the " + std::string(what),
                  path + ": not a regular file (" + kind + ")", "a regular file, a pipe or a FIFO");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw_runtime(component, "cannot open the " + std::string(what),
                  path + ": " + std::strerror(errno), "a readable file");
  }
  try {
    std::string text = read_fd(fd, S_ISREG(st.st_mode), path, component, what, max_bytes);
    ::close(fd);
    return text;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

}  // namespace snapkv
