// LlamaSession::from_caches, clone and truncated: sessions that start from caches built elsewhere
// (a loaded .kvc file) or from another session (all of it, or its first tokens). Kept apart from
// llama.cpp, like llama_extend.cpp.
#include <algorithm>
#include <string>
#include <utility>

#include "snapkv/model/llama.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {

LlamaSession LlamaSession::from_caches(const LlamaModel& model, std::vector<LayerCache> caches,
                                       SessionOptions options) {
  const LlamaConfig& c = model.config();
  if (caches.size() != c.n_layers) {
    throw_invalid("llama", "cache count", num(caches.size()), "n_layers = " + num(c.n_layers));
  }
  const CacheConfig config = caches.front().config();
  config.validate();
  const size_t offset = caches.front().offset();
  const size_t next = caches.front().next_position();
  for (size_t l = 0; l < caches.size(); ++l) {
    const LayerCache& cache = caches[l];
    const CacheDims& d = cache.dims();
    if (d.n_heads != c.n_heads || d.n_kv_heads != c.n_kv_heads || d.head_dim != c.head_dim) {
      throw_invalid(
          "llama", "cache dimensions of layer " + num(l),
          num(d.n_heads) + "/" + num(d.n_kv_heads) + " heads, head_dim " + num(d.head_dim),
          num(c.n_heads) + "/" + num(c.n_kv_heads) + " heads, head_dim " + num(c.head_dim));
    }
    if (cache.prompt_open() || cache.offset() != offset || offset == 0 ||
        cache.next_position() != next || next > c.n_ctx) {
      throw_invalid("llama", "cache of layer " + num(l) + " is not a finished prompt",
                    num(cache.offset()) + " tokens, next position " + num(cache.next_position()) +
                        (cache.prompt_open() ? ", prompt open" : ""),
                    "an ended prompt of the same tokens and next position <= " + num(c.n_ctx) +
                        " in every layer");
    }
  }
  LlamaSession session(model, config, options, std::move(caches));  // validates the options
  session.prefilled_ = true;
  return session;
}

LlamaSession LlamaSession::clone() const {
  std::vector<LayerCache> copies;
  copies.reserve(caches_.size());
  for (const LayerCache& cache : caches_) copies.push_back(cache.clone());
  LlamaSession copy(*model_, cache_config_, options_, std::move(copies));
  copy.prefilled_ = prefilled_;
  copy.plan_ = plan_;
  copy.shared_prompt_ = shared_prompt_;
  return copy;
}

LlamaSession LlamaSession::truncated(size_t n) const {
  if (!prefilled_ || shared_prompt_) {
    throw_invalid("llama", "truncate a session",
                  prefilled_ ? "a shared prefill" : "no prompt run yet",
                  "a prefilled session (not a shared prefill)");
  }
  if (n == 0 || n > n_past()) {
    throw_invalid("llama", "truncate length", num(n), "1 .. n_past() = " + num(n_past()));
  }
  std::vector<LayerCache> cut;
  cut.reserve(caches_.size());
  for (const LayerCache& cache : caches_) cut.push_back(cache.truncated(n));
  LlamaSession copy(*model_, cache_config_, options_, std::move(cut));
  copy.prefilled_ = true;
  copy.plan_ = plan_;
  copy.prompt_tokens_.assign(
      prompt_tokens_.begin(),
      prompt_tokens_.begin() + static_cast<std::ptrdiff_t>(std::min(n, prompt_tokens_.size())));
  return copy;
}

}  // namespace snapkv
