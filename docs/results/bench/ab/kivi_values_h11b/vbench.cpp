// microbench: avx512 integer value kernel, 16K rows, 4 queries, head_dim 128, group 32, 2-bit
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
#include <algorithm>
#include "kv/kivi_kernels.h"
#include "snapkv/util/fp16.h"
using namespace snapkv;
int main(int argc, char** argv) {
  const size_t rows = 16384, hd = 128, grp = 32, nq = 4, ng = hd / grp, rb = hd / 4;
  std::mt19937 rng(1);
  std::vector<uint8_t> codes(rows * rb);
  for (auto& c : codes) c = rng();
  std::vector<KiviParams> params(rows * ng);
  std::uniform_real_distribution<float> u(0.01f, 1.0f);
  for (auto& p : params) { p.scale = fp32_to_fp16(u(rng)); p.zero = fp32_to_fp16(u(rng) - 0.5f); }
  std::vector<float> w(nq * rows);
  for (auto& x : w) x = std::exp(8.0f * u(rng)) / float(rows) / 300.f;
  std::vector<float> out(nq * hd);
  double best = 1e9;
  const int trials = argc > 1 ? atoi(argv[1]) : 300;
  for (int t = 0; t < trials; ++t) {
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < 8; ++k)
      isa_avx512::kivi_value_rows_accumulate_q8(out.data(), w.data(), rows, nq, codes.data(), params.data(), rows, hd, grp, 2);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, ms);
  }
  printf("min ms per 8 heads x 16K rows x 4 q: %.4f (out0 %g)\n", best, out[0]);
}
