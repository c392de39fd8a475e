// Runs the built `snapkv` binary (SNAPKV_CLI_PATH) and captures exit code, stdout and stderr;
// a per-test temporary directory for input files.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace snapkv::clitest {

struct CliResult {
  int rc = -1;
  std::string out;
  std::string err;
};

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ =
        std::filesystem::temp_directory_path() /
        ("snapkv_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path path_;
};

// args are appended to the binary path as given (quote them yourself if needed).
inline CliResult run_cli(const std::string& args, const TempDir& dir) {
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const std::string cmd = std::string("'") + SNAPKV_CLI_PATH + "' " + args + " >'" + out + "' 2>'" +
                          err + "' </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

}  // namespace snapkv::clitest
