// Placeholder until the KIVI codec lands (issue "KIVI"): selecting kivi2/kivi4 is a clear error.
#include <string>

#include "kv/stores.h"
#include "snapkv/util/error.h"

namespace snapkv {

std::unique_ptr<RowStore> make_kivi_row_store(const CacheConfig& config, RowRole, size_t) {
  throw_invalid("codec", "KIVI codec is not built yet", std::string(to_string(config.codec)),
                "fp16");
}

}  // namespace snapkv
