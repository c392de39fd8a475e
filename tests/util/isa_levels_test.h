// Test helpers for the SIMD seam (snapkv/util/cpu.h): the ISA levels this build compiled and this
// CPU can run, and a guard that restores the level active when it was made.
#pragma once

#include <vector>

#include "snapkv/util/cpu.h"

namespace snapkv::isa_test {

// Every level compiled into this build whose features this CPU has, scalar first.
inline std::vector<IsaLevel> runnable_levels() {
  std::vector<IsaLevel> levels;
  for (const IsaLevel level : kIsaLevels) {
    if (isa_compiled(level) && isa_missing_features(level, cpu_features()).empty()) {
      levels.push_back(level);
    }
  }
  return levels;
}

// Restores the level active when the guard was made.
class IsaLevelGuard {
 public:
  IsaLevelGuard() : saved_(isa_level()) {}
  ~IsaLevelGuard() { set_isa_level(saved_); }
  IsaLevelGuard(const IsaLevelGuard&) = delete;
  IsaLevelGuard& operator=(const IsaLevelGuard&) = delete;

 private:
  IsaLevel saved_;
};

}  // namespace snapkv::isa_test
