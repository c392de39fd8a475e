// Progress lines on stderr (cli/progress.h).
#include "progress.h"

#include <cstdio>

#include "command.h"
#include "snapkv/util/read_progress.h"

namespace snapkv::cli {

bool ProgressFlag::enabled(bool quiet) const {
  if (quiet || forced < 0) return false;
  return forced > 0 || stderr_is_tty();
}

void add_progress_flags(CLI::App& app, ProgressFlag& flag) {
  app.add_flag_function(
      "--progress,!--no-progress", [&flag](int64_t count) { flag.forced = count > 0 ? 1 : -1; },
      "Draw progress on stderr (default: only when stderr is a terminal)");
}

Progress::Progress(std::string component, bool enabled)
    : component_(std::move(component)), enabled_(enabled) {}

Progress::~Progress() {
  done();
}

void Progress::update(const char* phase, size_t done, size_t total) {
  if (!enabled_) return;
  const double now = timer_.seconds();
  if (phase_ != phase) {
    phase_ = phase;
    phase_start_ = now;
  }
  if (done < total && now - last_draw_ < 0.1) return;
  last_draw_ = now;
  const double elapsed = now - phase_start_;
  const double rate = static_cast<double>(done) / std::max(elapsed, 1e-9);
  const double eta = static_cast<double>(total > done ? total - done : 0) / std::max(rate, 1e-9);
  char line[512];
  if (phase_ == "prefill" && done > 0) {
    std::snprintf(line, sizeof line, "[%s] prefill %zu/%zu tokens, %.0f tok/s, ETA %.1f s",
                  component_.c_str(), done, total, rate, eta);
  } else if (phase_ == "loading model") {
    constexpr double kMiB = 1024.0 * 1024.0;
    std::snprintf(line, sizeof line, "[%s] loading model %.0f/%.0f MiB, %.0f MiB/s, ETA %.1f s",
                  component_.c_str(), static_cast<double>(done) / kMiB,
                  static_cast<double>(total) / kMiB, rate / kMiB, eta);
  } else if (phase_ == "kvzip") {
    std::snprintf(line, sizeof line, "[%s] KVzip reconstruction pass%s (%.1f s)",
                  component_.c_str(), done < total ? "..." : " done", elapsed);
  } else if (done > 0 && done < total) {
    std::snprintf(line, sizeof line, "[%s] %s %zu/%zu, ETA %.1f s", component_.c_str(),
                  phase_.c_str(), done, total, eta);
  } else {
    std::snprintf(line, sizeof line, "[%s] %s %zu/%zu", component_.c_str(), phase_.c_str(), done,
                  total);
  }
  shown_ = line;
  std::fprintf(stderr, "\r\033[K%s", line);
  std::fflush(stderr);
  drawn_ = true;
}

std::function<void(const char*, size_t, size_t)> Progress::callback() {
  if (!enabled_) return {};
  return [this](const char* phase, size_t done, size_t total) { update(phase, done, total); };
}

void Progress::log(const std::string& line) {
  if (drawn_) std::fputs("\r\033[K", stderr);
  std::fprintf(stderr, "%s\n", line.c_str());
  if (drawn_) std::fputs(shown_.c_str(), stderr);
  std::fflush(stderr);
}

LlamaModel load_model(const std::string& component, const std::string& path, bool progress) {
  Progress p(component, progress);
  ReadProgressScope scope(progress ? ReadProgressFn([&p](size_t done, size_t total) {
    p.update("loading model", done, total);
  })
                                   : ReadProgressFn());
  LlamaModel model = LlamaModel::load(path);
  p.done();
  return model;
}

void Progress::done() {
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace snapkv::cli
