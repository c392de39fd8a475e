// Peak RSS from getrusage, current RSS from /proc/self/statm.
#include "snapkv/util/rusage.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace snapkv {

size_t peak_rss_bytes() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0 || usage.ru_maxrss < 0) return 0;
#if defined(__APPLE__)
  return static_cast<size_t>(usage.ru_maxrss);  // bytes on macOS
#else
  return static_cast<size_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
#endif
}

size_t current_rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size_pages = 0, resident_pages = 0;
  const int n = std::fscanf(f, "%lu %lu", &size_pages, &resident_pages);
  std::fclose(f);
  const long page = sysconf(_SC_PAGESIZE);
  if (n != 2 || page <= 0) return 0;
  return static_cast<size_t>(resident_pages) * static_cast<size_t>(page);
}

bool reset_peak_rss() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool written = std::fputs("5", f) >= 0;
  const bool closed = std::fclose(f) == 0;  // the kernel acts (or refuses) on the write
  return written && closed;
}

size_t peak_rss_since_reset_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long v = 0;
    if (std::strncmp(line, "VmHWM:", 6) == 0 && std::sscanf(line + 6, "%lu", &v) == 1) {
      kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

}  // namespace snapkv
