// Per-thread scratch buffers for the compressing path (fp32 copies of a head's rows, window
// logits): reused from one call to the next on the same thread instead of allocated, zero-filled
// and page-faulted afresh on every update (at 64K rows a head's logits alone are 32 MiB, and the
// kernel's page clearing cost more than the scoring). Private to kv/.
//
// Promises: scratch_floats(slot, n) returns at least n floats owned by the calling thread, left
// uninitialised, valid until the thread's next call with the same slot. Leaves out: shrinking —
// a thread keeps the largest buffer it has asked for (bounded by the largest head it scored:
// n_rows * head_dim floats per row slot, 128 * n_rows floats of logits, one tile of keys).
#pragma once

#include <array>
#include <cstddef>
#include <memory>

namespace snapkv {

enum class ScratchSlot { keys, values, logits, key_tile, count };

inline float* scratch_floats(ScratchSlot slot, size_t n) {
  struct Buffer {
    std::unique_ptr<float[]> data;
    size_t capacity = 0;
  };
  thread_local std::array<Buffer, static_cast<size_t>(ScratchSlot::count)> buffers;
  Buffer& b = buffers[static_cast<size_t>(slot)];
  if (b.capacity < n) {
    b.data.reset();              // free first: the old and new buffers need not both be resident
    b.data.reset(new float[n]);  // default-initialised: no zero fill
    b.capacity = n;
  }
  return b.data.get();
}

}  // namespace snapkv
