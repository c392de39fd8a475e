// A one-line progress bar with an ETA for long evaluation runs, drawn on stderr.
// Promises: draws only when enabled (callers pass "stderr is a terminal and not --quiet"), at most
// ten times a second plus the final state; finish() ends the line. ETA = elapsed / done * left.
// Leaves out: nested bars, terminal width detection (the line stays under 80 columns).
#pragma once

#include <cstddef>
#include <string>

#include "snapkv/util/timer.h"

namespace snapkv::eval {

class ProgressBar {
 public:
  ProgressBar(std::string label, bool enabled);
  void update(size_t done, size_t total);
  void finish();
  // "1h02m", "3m07s", "12s"
  static std::string format_duration(double seconds);

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  Timer timer_;
  double last_draw_ = -1.0;
};

}  // namespace snapkv::eval
