// Peak RSS from getrusage, current RSS from /proc/self/statm.
#include "snapkv/util/rusage.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

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

}  // namespace snapkv
