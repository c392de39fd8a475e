// An engine-agnostic use of the snapkv C++ library, as an inference engine would host it: build one
// cache per layer from a config, then per layer attend over the cache and update it with the
// chunk's K/V (rotated by the engine), and read the accounting. The "engine" here is random
// numbers: the point is the calls and the shapes, not a model.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "snapkv/kv/core/builder.h"

int main() {
  const snapkv::ModelDims dims{4, 8, 2, 64};  // layers, query heads, KV heads, head_dim
  snapkv::CacheConfig cfg;                    // policy snapkv, codec fp16 by default
  cfg.budget = 128;
  cfg.window = 16;
  cfg.pool = snapkv::PoolKind::max;
  cfg.kernel = 7;
  cfg.codec = snapkv::CodecKind::kivi2;
  std::vector<snapkv::LayerCache> caches = snapkv::build_caches(dims, cfg);

  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  const size_t prompt = 1000, d = dims.head_dim;
  for (size_t step = 0; step < 9; ++step) {  // one prefill chunk, then 8 decode steps
    const size_t s = step == 0 ? prompt : 1;
    for (size_t l = 0; l < dims.n_layers; ++l) {
      const auto q = random(dims.n_heads * s * d);     // [n_heads][S][head_dim]
      const auto k = random(dims.n_kv_heads * s * d);  // [n_kv_heads][S][head_dim]
      const auto v = random(dims.n_kv_heads * s * d);
      std::vector<float> out(dims.n_heads * s * d);  // [n_heads][S][head_dim]
      caches[l].attend(out.data(), {q.data(), dims.n_heads, s, d},
                       {k.data(), dims.n_kv_heads, s, d}, {v.data(), dims.n_kv_heads, s, d});
      // The window's real queries: the chunk's last `window` rows of q, per head.
      const size_t w = std::min(s, cfg.window);
      std::vector<float> qw(dims.n_heads * w * d);  // [n_heads][w][head_dim]
      for (size_t h = 0; h < dims.n_heads; ++h) {
        for (size_t i = 0; i < w * d; ++i) qw[(h * w) * d + i] = q[(h * s + s - w) * d + i];
      }
      const snapkv::Tensor3 qwt{qw.data(), dims.n_heads, w, d};
      caches[l].update({k.data(), dims.n_kv_heads, s, d}, {v.data(), dims.n_kv_heads, s, d}, &qwt);
      if (!std::isfinite(out[0])) return 1;
    }
  }
  const snapkv::CacheStats st = snapkv::total_stats(caches);
  std::printf(
      "tokens seen %zu, kept %zu per KV head, %zu bytes stored (fp16 full: %zu), "
      "eviction ratio %.2f\n",
      st.tokens_seen, st.tokens_kept, st.bytes_stored, st.bytes_full_fp16, st.eviction_ratio());
  return st.tokens_seen == prompt + 8 && st.tokens_kept == cfg.budget + 8 ? 0 : 1;
}
