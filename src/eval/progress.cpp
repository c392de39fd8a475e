// Progress bar with ETA on stderr (eval/progress.h).
#include "snapkv/eval/progress.h"

#include <cmath>
#include <cstdio>
#include <utility>

namespace snapkv::eval {

ProgressBar::ProgressBar(std::string label, bool enabled)
    : label_(std::move(label)), enabled_(enabled) {}

std::string ProgressBar::format_duration(double seconds) {
  if (!(seconds >= 0.0) || !std::isfinite(seconds)) return "?";
  const auto s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lds", s);
  }
  return buf;
}

void ProgressBar::update(size_t done, size_t total) {
  if (!enabled_ || total == 0) return;
  const double now = timer_.seconds();
  if (done < total && last_draw_ >= 0.0 && now - last_draw_ < 0.1) return;
  last_draw_ = now;
  constexpr int kWidth = 24;
  const double fraction = static_cast<double>(done) / static_cast<double>(total);
  const int filled = static_cast<int>(fraction * kWidth);
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = '\0';
  const double eta =
      done == 0 ? -1.0 : now / static_cast<double>(done) * static_cast<double>(total - done);
  std::fprintf(stderr, "\r[%s] [%s] %zu/%zu %3.0f%% elapsed %s ETA %s   ", label_.c_str(), bar,
               done, total, 100.0 * fraction, format_duration(now).c_str(),
               format_duration(eta).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (enabled_ && drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace snapkv::eval
