// The plain cache mechanics many unit tests are written against: no pooling, the window competes
// with the other rows, and the budget enforced at every prefill chunk. The library's defaults
// (CacheConfig{}: causal max-pool kernel 11, window competing, compression at the end of the
// prompt, chosen by measurement in docs/TUNING.md) are tested as such in kv/config_test.cpp and
// tests/cli.
#pragma once

#include "snapkv/kv/core/config.h"

namespace snapkv::test {

inline CacheConfig plain_config() {
  CacheConfig c;
  c.pool = PoolKind::none;
  c.kernel = 1;
  c.keep_window = false;
  c.chunk_mode = ChunkMode::every_chunk;
  return c;
}

}  // namespace snapkv::test
