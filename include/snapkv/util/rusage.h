// Process memory figures for logs and reports: peak resident set size (getrusage) and the current
// resident set size (/proc/self/statm). Linux-first; 0 where the platform does not say.
#pragma once

#include <cstddef>

namespace snapkv {

// Peak resident set size of this process so far, in bytes (ru_maxrss).
size_t peak_rss_bytes();
// Resident set size now, in bytes (0 when /proc/self/statm is unavailable).
size_t current_rss_bytes();

}  // namespace snapkv
