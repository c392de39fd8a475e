// What a result file records about its run: model file hash, the git commit the binary was built
// from, machine, date
// (eval/report.h). SHA-256 is util/sha256.h (libcrypto; checked against FIPS 180-4 vectors in
// report_test).
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "snapkv/eval/report.h"
#include "snapkv/util/error.h"
#include "snapkv/util/sha256.h"
#include "snapkv_git_info.h"  // generated: SNAPKV_BUILD_GIT_COMMIT, SNAPKV_BUILD_GIT_DIRTY

namespace snapkv::eval {

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
  // the commit this binary was built from (cmake/git_info.cmake), not the working directory's
  const std::string commit = SNAPKV_BUILD_GIT_COMMIT;
  if (commit.size() == 40) {
    info.git_commit = commit;
    info.git_dirty = SNAPKV_BUILD_GIT_DIRTY != 0;
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
