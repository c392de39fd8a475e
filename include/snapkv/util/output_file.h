// Safe file output: the one writer every command's output goes through (results, JSON, .kvc
// files, task samples) and the checks that stop an output from destroying anything.
//
// Promises:
//  - what is at the target path decides how it is written:
//      absent or a regular file: written to TARGET.tmp.<pid> in the same directory, fsync'd, then
//        renamed over TARGET, so a reader (or a crash, or kill -9) never sees half a file;
//      a character device or a FIFO (/dev/null, a named pipe): written through directly, streamed,
//        never replaced; a FIFO without a reader is refused at open (never blocks);
//      a directory, a block device or a socket: refused by name;
//    with Seek::required (files that are later mapped, e.g. .kvc) anything but absent or regular
//    is refused by name;
//  - a symbolic link at the target is followed (up to 40 links): its final target is written (or
//    replaced through a temporary file beside it); the link itself stays;
//  - temporary files TARGET.tmp.<pid> whose process no longer runs (a kill -9) are removed when the
//    next OutputFile opens the same target; SIGTERM, SIGINT and SIGHUP remove the live ones;
//  - every failed write, fsync, close or rename throws snapkv::RuntimeError naming the path and
//    the system's reason, and the temporary file is removed;
//  - refuse_output_over_inputs() refuses, before any work, an output that names the same file as
//    an input (same device and inode after following links, or the same resolved path when
//    neither exists yet);
//  - write_stdout() and flush_stdout() report standard output's write errors (a full disk,
//    /dev/full) instead of dropping them.
// Leaves out: appending, partial updates and locking (two processes writing one target each
// produce a whole file; the last rename wins).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace snapkv {

enum class Seek { optional, required };

class OutputFile {
 public:
  OutputFile() = default;
  // Opens `path` for writing as described above; `what` names it in messages ("--json file").
  // Throws snapkv::RuntimeError when the target cannot be written.
  static OutputFile open(const std::string& path, std::string_view component, std::string_view what,
                         Seek seek = Seek::optional);
  // The checks of open() without creating anything: throws as open() would for a directory,
  // device, socket, FIFO without reader (the FIFO is not opened) or a missing directory.
  static void check(const std::string& path, std::string_view component, std::string_view what,
                    Seek seek = Seek::optional);
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&& o) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();  // not committed: the temporary file is removed, the target left as it was

  bool is_open() const { return fd_ >= 0; }
  bool direct() const { return direct_; }  // written through (device, FIFO), no rename
  const std::string& target() const { return target_; }
  void write(std::string_view bytes);
  // Flushes and closes; renames the temporary file into place (regular targets). Throws on any
  // failure (the target then keeps its old contents).
  void commit();

 private:
  void fail(std::string_view what_failed, int err);
  void reset() noexcept;
  std::string path_, target_, tmp_, component_, what_;
  int fd_ = -1;
  bool direct_ = false;
  int slot_ = -1;  // signal-cleanup slot of tmp_
};

// {path, option name}; empty paths and "-" are ignored.
using NamedPath = std::pair<std::string, std::string>;
// Throws std::invalid_argument "[component] --out names the same file as --model, got P,
// expected a path that is not an input" when `output` is the same file as any of `inputs`.
void refuse_output_over_inputs(std::string_view component, const NamedPath& output,
                               const std::vector<NamedPath>& inputs);

// Removes PATH.tmp.<pid> files beside `target` whose process is gone; returns how many.
size_t remove_stale_temp_files(const std::string& target);

// Writes all of `bytes` to standard output (through stdio, so it stays ordered with printf) and
// flushes; throws snapkv::RuntimeError when standard output cannot take them.
void write_stdout(std::string_view bytes, std::string_view component);
// Flushes stdio's and iostream's standard output; "" when everything written so far reached it,
// else the system's reason. main() calls it before exiting.
std::string flush_stdout();

}  // namespace snapkv
