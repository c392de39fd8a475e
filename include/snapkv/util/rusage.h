// Process memory figures for logs and reports: peak resident set size (getrusage) and the current
// resident set size (/proc/self/statm). Linux-first; 0 where the platform does not say.
#pragma once

#include <cstddef>

namespace snapkv {

// Peak resident set size of this process so far, in bytes (ru_maxrss).
size_t peak_rss_bytes();
// Resident set size now, in bytes (0 when /proc/self/statm is unavailable).
size_t current_rss_bytes();

// Peak resident set size of one phase (e.g. a benchmark's prefill): reset_peak_rss() sets the
// kernel's high-water mark back to the current RSS (Linux: "5" written to /proc/self/clear_refs)
// and returns false where that is not possible; peak_rss_since_reset_bytes() reads the mark
// (VmHWM in /proc/self/status; 0 when unavailable). Without a reset the mark is the process peak.
bool reset_peak_rss();
size_t peak_rss_since_reset_bytes();

}  // namespace snapkv
