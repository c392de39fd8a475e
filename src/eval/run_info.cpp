// What a result file records about its run: model file hash, git commit, machine, date
// (eval/report.h). SHA-256 is util/sha256.h (libcrypto; checked against FIPS 180-4 vectors in
// report_test).
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "snapkv/eval/report.h"
#include "snapkv/util/error.h"
#include "snapkv/util/sha256.h"

namespace snapkv::eval {
namespace {

// First line of a shell command's stdout ("" when it fails). Only fixed command strings are run
// (no user input reaches the shell); see collect_run_info for what the git lines record.
std::string command_output(const char* command) {
  FILE* pipe = popen(command, "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  const int rc = pclose(pipe);
  if (rc != 0) return "";
  return out;
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

}  // namespace

std::string sha256_hex(std::span<const uint8_t> bytes) {
  return to_hex(snapkv::sha256(bytes));
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_runtime("eval", "cannot read model file", path, "a readable file");
  snapkv::Sha256 h;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();
    if (got > 0)
      h.update({reinterpret_cast<const uint8_t*>(buffer.data()), static_cast<size_t>(got)});
  }
  if (in.bad()) throw_runtime("eval", "read error in model file", path, "a readable file");
  return to_hex(h.finish());
}

RunInfo collect_run_info(const std::string& model_path, int threads, const std::string& command) {
  RunInfo info;
  info.model_path = model_path;
  std::error_code ec;
  info.model_bytes = std::filesystem::file_size(model_path, ec);
  if (ec) throw_runtime("eval", "cannot stat model file", model_path, "an existing file");
  info.model_sha256 = sha256_file(model_path);
  const std::string commit = first_line(command_output("git rev-parse HEAD 2>/dev/null"));
  if (commit.size() == 40) {
    info.git_commit = commit;
    info.git_dirty =
        !command_output("git status --porcelain --untracked-files=no 2>/dev/null").empty();
  }
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  info.nproc = n > 0 ? static_cast<size_t>(n) : std::thread::hardware_concurrency();
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        info.cpu_model = line.substr(line.find_first_not_of(" \t", colon + 1));
      }
      break;
    }
  }
  info.threads = threads;
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  info.date = date;
  info.command = command;
  return info;
}

}  // namespace snapkv::eval
