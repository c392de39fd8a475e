// The kernel registry: one table of entry points per ISA level, holding every SIMD kernel of the
// project by family (bulk fp16 conversion; ops' dots, softmax, block decoders and GEMV rows; the
// integer dots with 8-bit activations), and the active level's table.
//
// Promises: active() is the table of the level snapkv/util/cpu.h makes active (the best level this
// build compiled and the CPU supports, or SNAPKV_ISA=...), resolved once at first use; after
// set_isa_level (tests, benchmarks) it is that level's table. A level this build does not compile
// holds the next level down's entries (kernels/isa_tables.h); one of another architecture is never
// active (util/cpu.cpp refuses it). A kernel call through it is one load, one test and one
// indirect jump.
// Leaves out: the kernels' contracts (each family's header and the public function it serves) and
// argument checks (the callers validate; kernels trust their sizes).
#pragma once

#include "kernels/fp16_kernels.h"
#include "kernels/fp16_rows.h"
#include "kernels/kivi/kivi_kernels.h"
#include "kernels/kivi/kivimix_kernels.h"
#include "kernels/ops_kernels.h"
#include "kernels/q8_dot.h"
#include "snapkv/util/cpu.h"

namespace snapkv::kernels {

struct Registry {
  Fp16Kernels fp16;          // bulk binary16 <-> fp32 conversion
  OpsKernels ops;            // dot, axpy, exp, softmax, block decoders, GEMV rows
  Q8DotKernels q8;           // integer dots with 8-bit activations
  Fp16RowKernels fp16_rows;  // fp16 cache rows: dots with queries, weighted sums
  KiviKernels kivi;          // KIVI key dots and value sums, float and integer forms
  KivimixKernels kivimix;    // kivimix's wide-channel pass
};

// Indexed by IsaLevel (registry.cpp).
extern const Registry kRegistry[kIsaLevelCount];

inline const Registry& active() {
  return isa_select(kRegistry);
}

}  // namespace snapkv::kernels
