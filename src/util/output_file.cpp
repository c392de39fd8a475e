// The one output writer (snapkv/util/output_file.h).
#include "snapkv/util/output_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {

namespace fs = std::filesystem;

// Temporary files being written, removed by the signal handler (unlink is async-signal-safe).
constexpr int kSlots = 16;
constexpr size_t kSlotBytes = 4096;
char g_slots[kSlots][kSlotBytes];
std::atomic<bool> g_slot_used[kSlots];

void remove_temps_and_reraise(int sig) {
  for (int i = 0; i < kSlots; ++i) {
    if (g_slot_used[i].load()) ::unlink(g_slots[i]);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// Installs the cleanup handler for signals whose disposition is still the default (a program
// with its own handler, e.g. a server's graceful shutdown, keeps it).
void install_cleanup_handler() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
      std::signal(sig, remove_temps_and_reraise);
    }
  }
}

int register_temp(const std::string& tmp) {
  if (tmp.size() >= kSlotBytes) return -1;
  install_cleanup_handler();
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_slot_used[i].load() && g_slot_used[i].compare_exchange_strong(expected, true)) {
      g_slot_used[i].store(false);  // not visible to the handler until the text is complete
      std::memcpy(g_slots[i], tmp.c_str(), tmp.size() + 1);
      g_slot_used[i].store(true);
      return i;
    }
  }
  return -1;  // more than kSlots at once: still removed on errors, not on signals
}

void unregister_temp(int slot) {
  if (slot >= 0) g_slot_used[slot].store(false);
}

// Follows symbolic links at `path` (relative targets against the link's directory), at most 40.
std::string resolve_links(const std::string& path, std::string_view component,
                          std::string_view what) {
  fs::path p = path;
  for (int i = 0; i < 40; ++i) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p.string();
    const fs::path t = fs::read_symlink(p, ec);
    if (ec) break;
    p = t.is_absolute() ? t : p.parent_path() / t;
  }
  throw_runtime(component, std::string(what) + ": too many symbolic links", path,
                "at most 40 links to follow");
}

const char* kind_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  return "not a regular file";
}

struct Target {
  std::string path;     // after following links
  bool exists = false;  //
  bool direct = false;  // device or FIFO: written through
};

Target classify(const std::string& path, std::string_view component, std::string_view what,
                Seek seek) {
  if (path.empty()) throw_invalid(component, std::string(what) + " path is empty", "''", "a path");
  Target t;
  t.path = resolve_links(path, component, what);
  struct stat st {};
  if (::stat(t.path.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      throw_runtime(component, std::string("cannot write the ") + std::string(what),
                    path + ": " + std::strerror(errno), "a writable path");
    }
    const fs::path dir = fs::path(t.path).parent_path();
    std::error_code ec;
    if (!dir.empty() && !fs::is_directory(dir, ec)) {
      throw_runtime(component, std::string("cannot write the ") + std::string(what), path,
                    "a path in an existing directory (" + dir.string() + " is not one)");
    }
    return t;
  }
  t.exists = true;
  if (S_ISREG(st.st_mode)) return t;
  const bool streamable = S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode);
  if (!streamable || seek == Seek::required) {
    throw_runtime(
        component,
        std::string("cannot write the ") + std::string(what) + " over " + kind_name(st.st_mode),
        path,
        seek == Seek::required ? "a regular file path (this output is read back mapped)"
                               : "a regular file, a character device or a FIFO");
  }
  t.direct = true;
  return t;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  const bool ea = ::stat(a.c_str(), &sa) == 0, eb = ::stat(b.c_str(), &sb) == 0;
  if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ea != eb) return false;
  std::error_code e1, e2;
  const fs::path ca = fs::weakly_canonical(a, e1), cb = fs::weakly_canonical(b, e2);
  return !e1 && !e2 && ca == cb;
}

}  // namespace

size_t remove_stale_temp_files(const std::string& target) {
  const fs::path p(target);
  const std::string prefix = p.filename().string() + ".tmp.";
  const std::string dir = p.parent_path().empty() ? "." : p.parent_path().string();
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  size_t removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::strtol(digits.c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    if (::unlink((fs::path(dir) / name).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

void OutputFile::check(const std::string& path, std::string_view component, std::string_view what,
                       Seek seek) {
  const Target t = classify(path, component, what, seek);
  if (t.direct) {
    struct stat st {};
    if (::stat(t.path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)) {
      // A FIFO has a reader now only if a non-blocking open for writing succeeds.
      const int fd = ::open(t.path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) {
        throw_runtime(component, std::string("cannot write the ") + std::string(what), path,
                      "a FIFO with a reader (" + std::string(std::strerror(errno)) + ")");
      }
      ::close(fd);
    }
  }
}

OutputFile OutputFile::open(const std::string& path, std::string_view component,
                            std::string_view what, Seek seek) {
  const Target t = classify(path, component, what, seek);
  OutputFile f;
  f.path_ = path;
  f.target_ = t.path;
  f.component_ = component;
  f.what_ = what;
  f.direct_ = t.direct;
  if (t.direct) {
    // Non-blocking open: a FIFO without a reader fails (ENXIO) instead of waiting forever.
    f.fd_ = ::open(t.path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (f.fd_ < 0) f.fail("cannot open", errno);
    const int flags = ::fcntl(f.fd_, F_GETFL);
    if (flags >= 0) ::fcntl(f.fd_, F_SETFL, flags & ~O_NONBLOCK);
    return f;
  }
  remove_stale_temp_files(t.path);
  f.tmp_ = t.path + ".tmp." + std::to_string(::getpid());
  f.fd_ = ::open(f.tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd_ < 0) {
    const int err = errno;
    f.tmp_.clear();
    f.fail("cannot create a temporary file beside", err);
  }
  f.slot_ = register_temp(f.tmp_);
  return f;
}

OutputFile::OutputFile(OutputFile&& o) noexcept {
  *this = std::move(o);
}

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this != &o) {
    reset();
    path_ = std::move(o.path_);
    target_ = std::move(o.target_);
    tmp_ = std::move(o.tmp_);
    component_ = std::move(o.component_);
    what_ = std::move(o.what_);
    fd_ = o.fd_;
    direct_ = o.direct_;
    slot_ = o.slot_;
    o.fd_ = -1;
    o.slot_ = -1;
    o.tmp_.clear();
  }
  return *this;
}

OutputFile::~OutputFile() {
  reset();
}

void OutputFile::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  unregister_temp(slot_);
  slot_ = -1;
}

void OutputFile::fail(std::string_view what_failed, int err) {
  reset();
  throw_runtime(component_, std::string(what_failed) + " the " + what_,
                path_ + ": " + std::strerror(err), "a writable path with room for the output");
}

void OutputFile::write(std::string_view bytes) {
  if (fd_ < 0) throw_runtime(component_, "write after close", path_, "an open output");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write", n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
}

void OutputFile::commit() {
  if (fd_ < 0) throw_runtime(component_, "commit after close", path_, "an open output");
  if (!direct_ && ::fsync(fd_) != 0) fail("cannot flush", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", errno);
  if (direct_) return;
  if (std::rename(tmp_.c_str(), target_.c_str()) != 0) fail("cannot rename into place", errno);
  tmp_.clear();
  unregister_temp(slot_);
  slot_ = -1;
}

void refuse_output_over_inputs(std::string_view component, const NamedPath& output,
                               const std::vector<NamedPath>& inputs) {
  if (output.first.empty() || output.first == "-") return;
  for (const NamedPath& in : inputs) {
    if (in.first.empty() || in.first == "-") continue;
    if (same_file(output.first, in.first)) {
      throw_invalid(component, output.second + " names the same file as " + in.second, output.first,
                    "an output path that is not an input of the command");
    }
  }
}

void write_stdout(std::string_view bytes, std::string_view component) {
  std::cout.flush();
  if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() ||
      std::fflush(stdout) != 0) {
    throw_runtime(component, "cannot write standard output", std::strerror(errno),
                  "standard output that takes the whole output");
  }
}

std::string flush_stdout() {
  std::cout.flush();
  const bool stream_failed = std::cout.fail();
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || stream_failed) {
    return errno != 0 ? std::strerror(errno) : "a write failed";
  }
  return std::string();
}

}  // namespace snapkv
