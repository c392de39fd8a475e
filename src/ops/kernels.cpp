// The per-level table of ops/ kernels (kernels.h): the one place that names every level's entry
// points; a level this build does not compile falls back to the next one down (kernels/isa.h).
#include "ops/kernels.h"

#include "kernels/isa_tables.h"
#include "snapkv/util/cpu.h"

namespace snapkv::ops_internal {

#define SNAPKV_OPS_TABLE(NS)                                                           \
  OpsKernels {                                                                         \
    &NS::dot, &NS::dot_f16, &NS::axpy, &NS::axpy_f16, &NS::exp_n, &NS::max_value,      \
        &NS::exp_shift_sum, &NS::exp_scale_shift_sum, &NS::softmax, &NS::decode_block, \
        &NS::decode_block, &NS::decode_block, &NS::decode_block, &NS::decode_block,    \
        &NS::decode_block, &NS::gemv_rows, &NS::dequantize_rows, &NS::gemv_rows_f16    \
  }

const OpsKernels kOpsTables[kIsaLevelCount] = SNAPKV_ISA_TABLE(SNAPKV_OPS_TABLE);

}  // namespace snapkv::ops_internal
