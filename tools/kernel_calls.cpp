// kernel_calls: calls one SIMD kernel a given number of times on fixed shapes, at the ISA level
// the library makes active (the best the CPU has, or SNAPKV_ISA=scalar|neon|neon_dot|avx2|avx512),
// for counting the instructions one call executes under an emulator
// (scripts/arm64_insn_counts.sh: two runs differing only in the number of calls, so the set-up
// cancels out). It measures nothing itself: it prints the kernel, the level and the calls.
// With --hash it also prints the sha256 of the kernel's outputs after the calls, so that two builds
// (e.g. NEON code before and after a change, or arm64 against x86-64 where the levels promise the
// same bits) can be compared without patching the program; count instructions without it.
//   kernel_calls <kernel> <calls>      kernel_calls --list
//   kernel_calls --hash <kernel|all> <calls>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/fp16_rows.h"
#include "kernels/kivi/kivi_kernels.h"
#include "kernels/q8_dot.h"
#include "kernels/registry.h"
#include "snapkv/ops/rope.h"
#include "snapkv/util/cpu.h"
#include "snapkv/util/fp16.h"
#include "snapkv/util/sha256.h"

namespace {

using namespace snapkv;
using ops_internal::BlockQ8_K;

constexpr size_t kCols = 4096;    // one activation row / GEMV width
constexpr size_t kRows = 16;      // F16 GEMV rows
constexpr size_t kHeadDim = 128;  // attention shapes
constexpr size_t kQueries = 4;    // queries per KV head (grouped-query attention)
constexpr size_t kCacheRows = 256;
constexpr size_t kKiviRows = 128;  // one KIVI key block / value tile run
constexpr size_t kGroup = 32;      // KIVI value group
constexpr size_t kHeads = 32;      // RoPE: heads of one token

std::mt19937 rng(7);

std::vector<float> floats(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<fp16_t> halves(size_t n) {
  const auto f = floats(n);
  std::vector<fp16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(f[i]);
  return h;
}

std::vector<uint8_t> bytes(size_t n) {
  std::uniform_int_distribution<int> dist(0, 255);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(dist(rng));
  return v;
}

// Weight blocks of random codes with finite scales (values do not steer the kernels' paths).
template <class Block>
std::vector<Block> blocks(size_t n, void (*fix)(Block&)) {
  std::vector<Block> v(n);
  const auto raw = bytes(n * sizeof(Block));
  std::memcpy(v.data(), raw.data(), raw.size());
  for (Block& b : v) fix(b);
  return v;
}

// The outputs feed a volatile sink, never printed: printing a value that depends on the number of
// calls would make the program's own work depend on it.
volatile float checksum = 0.0f;
void keep(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) checksum = checksum + x[i];
}

// One kernel set up on its inputs: `call` runs it once (what is counted), `output` gives the bytes
// of its result after the calls (for --hash).
struct Kernel {
  std::function<void()> call;
  std::function<std::span<const uint8_t>()> output;
};
using Setup = std::function<Kernel()>;

template <class T>
std::function<std::span<const uint8_t>()> bytes_of(std::shared_ptr<std::vector<T>> v) {
  return [v] {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v->data()),
                                    v->size() * sizeof(T));
  };
}

std::map<std::string, Setup> kernels_by_name() {
  std::map<std::string, Setup> k;
  k["q8_0_dot"] = [] {  // one Q8_0 weight row against Q8_0 activations
    auto x = floats(kCols);
    auto a = std::make_shared<std::vector<BlockQ8_0>>(kCols / kQ8BlockSize);
    ops_internal::quantize_act_q8_0(a->data(), x.data(), kCols);
    auto w = std::make_shared<std::vector<BlockQ8_0>>(
        blocks<BlockQ8_0>(kCols / kQ8BlockSize, [](BlockQ8_0& b) { b.d = fp32_to_fp16(0.01f); }));
    // The call as counted; the output (the dot's value) is computed again when asked for.
    auto r = std::make_shared<std::vector<float>>(1);
    return Kernel{
        [a, w] { checksum = checksum + ops_internal::dot_q8_0_q8_0(w->data(), a->data(), kCols); },
        [a, w, r] {
          (*r)[0] = ops_internal::dot_q8_0_q8_0(w->data(), a->data(), kCols);
          return bytes_of(r)();
        }};
  };
  k["q4_K_dot"] = [] {  // one Q4_K weight row against Q8_K activations
    auto x = floats(kCols);
    auto a = std::make_shared<std::vector<BlockQ8_K>>(kCols / kQK_K);
    ops_internal::quantize_act_q8_K(a->data(), x.data(), kCols);
    auto w = std::make_shared<std::vector<BlockQ4_K>>(blocks<BlockQ4_K>(kCols / kQK_K, [](auto& b) {
      b.d = fp32_to_fp16(0.01f);
      b.dmin = fp32_to_fp16(0.001f);
    }));
    // The call as counted; the output (the dot's value) is computed again when asked for.
    auto r = std::make_shared<std::vector<float>>(1);
    return Kernel{
        [a, w] { checksum = checksum + ops_internal::dot_q4_K_q8_K(w->data(), a->data(), kCols); },
        [a, w, r] {
          (*r)[0] = ops_internal::dot_q4_K_q8_K(w->data(), a->data(), kCols);
          return bytes_of(r)();
        }};
  };
  k["q8_0_quantize"] = [] {  // one activation row to Q8_0 blocks
    auto x = std::make_shared<std::vector<float>>(floats(kCols));
    auto a = std::make_shared<std::vector<BlockQ8_0>>(kCols / kQ8BlockSize);
    return Kernel{[x, a] {
                    ops_internal::quantize_act_q8_0(a->data(), x->data(), kCols);
                    checksum = checksum + static_cast<float>(a->back().qs[0]);
                  },
                  bytes_of(a)};
  };
  k["f16_gemv"] = [] {  // kRows rows of an F16 matrix times x (the GEMV rows kernel)
    auto x = std::make_shared<std::vector<float>>(floats(kCols));
    auto m = std::make_shared<std::vector<fp16_t>>(halves(kRows * kCols));
    auto out = std::make_shared<std::vector<float>>(kRows);
    return Kernel{[x, m, out] {
                    const WeightMatrix w{WeightType::f16, m->data(), kRows, kCols};
                    kernels::active().ops.gemv_rows(out->data(), x->data(), w, 0, kRows);
                    keep(out->data(), kRows);
                  },
                  bytes_of(out)};
  };
  k["fp16_rows_dot"] = [] {  // kQueries queries against kCacheRows fp16 key rows
    auto q = std::make_shared<std::vector<float>>(floats(kQueries * kHeadDim));
    auto rows = std::make_shared<std::vector<fp16_t>>(halves(kCacheRows * kHeadDim));
    auto out = std::make_shared<std::vector<float>>(kQueries * kCacheRows);
    return Kernel{[q, rows, out] {
                    fp16_rows_dot(out->data(), kCacheRows, q->data(), kQueries, rows->data(),
                                  kCacheRows, kHeadDim, 0);
                    keep(out->data(), 1);
                  },
                  bytes_of(out)};
  };
  k["fp16_rows_accumulate"] = [] {  // weighted sum of kCacheRows fp16 value rows, kQueries queries
    auto wts = std::make_shared<std::vector<float>>(floats(kQueries * kCacheRows));
    auto rows = std::make_shared<std::vector<fp16_t>>(halves(kCacheRows * kHeadDim));
    auto out = std::make_shared<std::vector<float>>(kQueries * kHeadDim);
    return Kernel{[wts, rows, out] {
                    fp16_rows_accumulate(out->data(), wts->data(), kCacheRows, kQueries,
                                         rows->data(), kCacheRows, kHeadDim, 0);
                    keep(out->data(), 1);
                  },
                  bytes_of(out)};
  };
  k["kivi2_key_dot"] = [] {  // kQueries queries against one 2-bit key block of kKiviRows rows
    auto q = std::make_shared<std::vector<float>>(floats(kQueries * kHeadDim));
    auto scales = std::make_shared<std::vector<float>>(floats(kHeadDim, 0.1f));
    auto zeros = std::make_shared<std::vector<float>>(floats(kHeadDim));
    auto words = std::make_shared<std::vector<uint8_t>>(bytes(kKiviRows * kHeadDim));
    auto out = std::make_shared<std::vector<float>>(kQueries * kKiviRows);
    return Kernel{[q, scales, zeros, words, out] {
                    kivi_key_block_dot(out->data(), kKiviRows, q->data(), kQueries, scales->data(),
                                       zeros->data(), words->data(), kKiviRows, kHeadDim, 2);
                    keep(out->data(), 1);
                  },
                  bytes_of(out)};
  };
  k["kivi2_value_sum"] = [] {  // weighted sum of kKiviRows 2-bit value rows, kQueries queries
    auto wts = std::make_shared<std::vector<float>>(floats(kQueries * kKiviRows));
    auto codes = std::make_shared<std::vector<uint8_t>>(bytes(kKiviRows * kHeadDim));
    auto params = std::make_shared<std::vector<KiviParams>>(kKiviRows * kHeadDim / kGroup);
    for (KiviParams& p : *params) p = KiviParams{fp32_to_fp16(0.05f), fp32_to_fp16(-0.1f)};
    auto out = std::make_shared<std::vector<float>>(kQueries * kHeadDim);
    return Kernel{[wts, codes, params, out] {
                    kivi_value_rows_accumulate(out->data(), wts->data(), kKiviRows, kQueries,
                                               codes->data(), params->data(), kKiviRows, kHeadDim,
                                               kGroup, 2);
                    keep(out->data(), 1);
                  },
                  bytes_of(out)};
  };
  k["exp_n"] = [] {  // kCols exponentials (softmax's and window scoring's exp)
    auto x = std::make_shared<std::vector<float>>(floats(kCols, 4.0f));
    auto y = std::make_shared<std::vector<float>>(kCols);
    return Kernel{[x, y] {
                    kernels::active().ops.exp_n(y->data(), x->data(), kCols);
                    keep(y->data(), 1);
                  },
                  bytes_of(y)};
  };
  k["fp16_to_fp32"] = [] {  // kCols binary16 values widened
    auto h = std::make_shared<std::vector<fp16_t>>(halves(kCols));
    auto f = std::make_shared<std::vector<float>>(kCols);
    return Kernel{[h, f] {
                    fp16_to_fp32_n(f->data(), h->data(), kCols);
                    keep(f->data(), 1);
                  },
                  bytes_of(f)};
  };
  k["fp32_to_fp16"] = [] {  // kCols fp32 values narrowed
    auto f = std::make_shared<std::vector<float>>(floats(kCols));
    auto h = std::make_shared<std::vector<fp16_t>>(kCols);
    return Kernel{[f, h] {
                    fp32_to_fp16_n(h->data(), f->data(), kCols);
                    checksum = checksum + fp16_to_fp32(h->back());
                  },
                  bytes_of(h)};
  };
  for (const bool neox : {false, true}) {  // one token: kHeads heads of kHeadDim, full rotation
    k[neox ? "rope_neox" : "rope_norm"] = [neox] {
      const int64_t pos = 1234;
      auto table = std::make_shared<RopeTable>(
          &pos, 1,
          RopeParams{kHeadDim, 10000.0, 1.0, neox ? RopeKind::neox : RopeKind::norm, nullptr});
      auto x = std::make_shared<std::vector<float>>(floats(kHeads * kHeadDim));
      return Kernel{[table, x] {
                      table->apply(x->data(), kHeads, kHeadDim);
                      keep(x->data(), 1);
                    },
                    bytes_of(x)};
    };
  }
  return k;
}

int usage() {
  std::fprintf(stderr,
               "usage: kernel_calls [--hash] <kernel> <calls> | kernel_calls --hash all <calls> | "
               "kernel_calls --list\n");
  return 2;
}

// Runs one kernel `calls` times; prints the kernel, the level, the calls and, with `hash`, the
// sha256 of its outputs.
void run(const std::string& name, const Setup& setup, long calls, bool hash) {
  rng.seed(7);  // the same inputs whether one kernel runs or all of them
  const Kernel k = setup();
  for (long i = 0; i < calls; ++i) k.call();
  std::printf("%s level %s calls %ld", name.c_str(), to_string(isa_level()), calls);
  if (hash) std::printf(" sha256 %s", to_hex(sha256(k.output())).c_str());
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto table = kernels_by_name();
    if (argc == 2 && std::string(argv[1]) == "--list") {
      for (const auto& [name, setup] : table) std::printf("%s\n", name.c_str());
      return 0;
    }
    const bool hash = argc > 1 && std::string(argv[1]) == "--hash";
    if (argc != 3 + (hash ? 1 : 0)) return usage();
    const std::string kernel = argv[hash ? 2 : 1];
    const char* calls_text = argv[hash ? 3 : 2];
    char* end = nullptr;
    const long calls = std::strtol(calls_text, &end, 10);
    if (end == calls_text || *end != '\0' || calls < 0 || calls > 1000000) {
      std::fprintf(stderr, "kernel_calls: calls out of range, got %s, expected 0..1000000\n",
                   calls_text);
      return 2;
    }
    if (hash && kernel == "all") {
      for (const auto& [name, setup] : table) run(name, setup, calls, true);
      return 0;
    }
    const auto it = table.find(kernel);
    if (it == table.end()) {
      std::fprintf(stderr, "kernel_calls: unknown kernel '%s' (--list names them)\n",
                   kernel.c_str());
      return 2;
    }
    run(kernel, it->second, calls, hash);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_calls: %s\n", e.what());
    return 1;
  }
}
