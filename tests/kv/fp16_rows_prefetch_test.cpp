// The fp16 row kernels' software prefetch (kernels/fp16_rows.h) changes no result: every
// distance, including ones that reach past the end of the rows, gives the bits of no prefetching,
// at the ISA level the run forces (ctest -L isa).
#include <gtest/gtest.h>

#include <vector>

#include "kernels/fp16_rows.h"
#include "kv/kivi_test_util.h"

namespace snapkv {
namespace {

TEST(Fp16StoreRows, PrefetchDistanceChangesNoResult) {
  for (size_t hd : {size_t{128}, size_t{64}, size_t{40}}) {
    const size_t n = 75, n_q = 4, stride = n + 1;
    const std::vector<float> x = kivi_test::realistic_rows(n, hd, 31, true);
    std::vector<fp16_t> rows(x.size());
    for (size_t i = 0; i < x.size(); ++i) rows[i] = fp32_to_fp16(x[i]);
    const std::vector<float> q = kivi_test::realistic_rows(n_q, hd, 32, false);
    const std::vector<float> w = kivi_test::realistic_rows(n_q, stride, 33, false);
    std::vector<float> dot_none(n_q * stride, 0.0f), acc_none(n_q * hd, 0.25f);
    fp16_rows_dot(dot_none.data(), stride, q.data(), n_q, rows.data(), n, hd, 0);
    fp16_rows_accumulate(acc_none.data(), w.data(), stride, n_q, rows.data(), n, hd, 0);
    for (size_t ahead : {size_t{64}, size_t{4096}, size_t{16384}, fp16_rows_prefetch_bytes()}) {
      std::vector<float> dot(n_q * stride, 0.0f), acc(n_q * hd, 0.25f);
      fp16_rows_dot(dot.data(), stride, q.data(), n_q, rows.data(), n, hd, ahead);
      fp16_rows_accumulate(acc.data(), w.data(), stride, n_q, rows.data(), n, hd, ahead);
      EXPECT_EQ(dot, dot_none) << "head_dim " << hd << " prefetch " << ahead;
      EXPECT_EQ(acc, acc_none) << "head_dim " << hd << " prefetch " << ahead;
    }
  }
}

}  // namespace
}  // namespace snapkv
