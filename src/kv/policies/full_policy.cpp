// full: the no-eviction baseline. The cache never asks it to select (its budget does not apply);
// if asked anyway it keeps every candidate.
#include <numeric>

#include "kv/policies/policies.h"

namespace snapkv {
namespace {

class FullPolicy final : public EvictionPolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::full; }
  SelectionResult select(const SelectionInput& in) override {
    SelectionResult result;
    result.keep.resize(in.n_rows);
    std::iota(result.keep.begin(), result.keep.end(), 0u);
    return result;
  }
  std::unique_ptr<EvictionPolicy> clone() const override {
    return std::make_unique<FullPolicy>(*this);
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_full_policy() {
  return std::make_unique<FullPolicy>();
}

}  // namespace snapkv
