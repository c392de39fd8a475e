// The one place that names every level's kernels (kernels/registry.h): each family's entry macro
// applied to each level's namespace, a level this build does not compile taking the next one down
// (kernels/isa_tables.h).
#include "kernels/registry.h"

#include "kernels/isa_tables.h"

namespace snapkv::kernels {

#define SNAPKV_REGISTRY_ENTRY(NS)                                                         \
  Registry {                                                                              \
    SNAPKV_FP16_KERNELS_ENTRY(NS), SNAPKV_OPS_KERNELS_ENTRY(NS), SNAPKV_Q8_DOT_ENTRY(NS), \
        SNAPKV_FP16_ROWS_ENTRY(NS), SNAPKV_KIVI_ENTRY(NS), SNAPKV_KIVIMIX_ENTRY(NS)       \
  }

const Registry kRegistry[kIsaLevelCount] = SNAPKV_ISA_TABLE(SNAPKV_REGISTRY_ENTRY);

}  // namespace snapkv::kernels
