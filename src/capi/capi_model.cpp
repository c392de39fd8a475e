// The C ABI's reference-engine part (include/snapkv/snapkv.h): models, generation into a
// callback through the library's one generation loop (model/generation.h), and compressed
// documents (.kvc) as `snapkv compress` / `snapkv ask` make and read them.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi_internal.h"
#include "snapkv/model/generation.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/prompt_cache.h"
#include "snapkv/model/sampler.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/snapkv.h"
#include "snapkv/util/text.h"
#include "snapkv/util/timer.h"

struct snapkv_model {
  snapkv::LlamaModel model;
  snapkv::Tokenizer tokenizer;
  explicit snapkv_model(snapkv::LlamaModel m)
      : model(std::move(m)), tokenizer(snapkv::Tokenizer::from_gguf(model.file())) {}
};

struct snapkv_doc {
  const snapkv_model* model = nullptr;
  std::unique_ptr<snapkv::LlamaSession> session;
  std::vector<int32_t> tokens;
};

namespace {

using snapkv::num;
using snapkv::capi::guarded;
using snapkv::capi::kComponent;
using snapkv::capi::require;

const snapkv_model& model_of(const snapkv_model* m) {
  require(m != nullptr, "model", "NULL", "a model from snapkv_model_load");
  return *m;
}

const char* text_of(const char* s, const char* what) {
  require(s != nullptr, what, "NULL", "a NUL-terminated string");
  return s;
}

snapkv::SessionOptions session_options(const snapkv_model& m, size_t prefill_chunk) {
  require(prefill_chunk >= 1, "prefill_chunk", "0", ">= 1 tokens");
  return snapkv::SessionOptions{
      prefill_chunk, snapkv::ReconstructionOptions{snapkv::kvzip_repeat_prompt(m.tokenizer)}};
}

// Copies `s` into out (capacity - 1 bytes at most, NUL-terminated), the full length to *n_out.
void copy_out(const std::string& s, char* out, size_t capacity, size_t* n_out) {
  require(n_out != nullptr, "n_out", "NULL", "a pointer to receive the length");
  require(out != nullptr || capacity == 0, "out", "NULL with capacity " + num(capacity),
          "a buffer of capacity bytes");
  if (capacity > 0) {
    const size_t n = std::min(capacity - 1, s.size());
    std::memcpy(out, s.data(), n);
    out[n] = '\0';
  }
  *n_out = s.size();
}

int finish_code(snapkv::FinishReason r) {
  switch (r) {
    case snapkv::FinishReason::stop:
      return SNAPKV_FINISH_STOP;
    case snapkv::FinishReason::length:
      return SNAPKV_FINISH_LENGTH;
    case snapkv::FinishReason::context:
      return SNAPKV_FINISH_CONTEXT;
    case snapkv::FinishReason::cancelled:
      return SNAPKV_FINISH_CANCELLED;
  }
  return SNAPKV_FINISH_STOP;
}

}  // namespace

extern "C" {

snapkv_status snapkv_model_load(const char* path, snapkv_model** out) {
  return guarded([&] {
    require(out != nullptr, "out", "NULL", "a pointer to receive the model");
    *out = nullptr;
    *out = new snapkv_model(snapkv::LlamaModel::load(text_of(path, "path")));
  });
}

void snapkv_model_free(snapkv_model* model) {
  delete model;
}

snapkv_status snapkv_model_dims_of(const snapkv_model* model, snapkv_model_dims* out) {
  return guarded([&] {
    const snapkv::LlamaConfig& c = model_of(model).model.config();
    require(out != nullptr, "out", "NULL", "a snapkv_model_dims to fill");
    *out = snapkv_model_dims{c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim};
  });
}

snapkv_status snapkv_tokenize(const snapkv_model* model, const char* text, int add_special,
                              int32_t* out, size_t capacity, size_t* n_out) {
  return guarded([&] {
    const snapkv_model& m = model_of(model);
    require(n_out != nullptr, "n_out", "NULL", "a pointer to receive the count");
    require(out != nullptr || capacity == 0, "out", "NULL with capacity " + num(capacity),
            "a buffer of capacity ids");
    const std::vector<int32_t> ids =
        m.tokenizer.encode(text_of(text, "text"), add_special != 0, false);
    std::copy_n(ids.begin(), std::min(capacity, ids.size()), out);
    *n_out = ids.size();
  });
}

snapkv_status snapkv_detokenize(const snapkv_model* model, const int32_t* ids, size_t n, char* out,
                                size_t capacity, size_t* n_out) {
  return guarded([&] {
    const snapkv_model& m = model_of(model);
    require(ids != nullptr || n == 0, "ids", "NULL with n " + num(n), "n token ids");
    copy_out(m.tokenizer.decode(std::span<const int32_t>(ids, n)), out, capacity, n_out);
  });
}

void snapkv_generation_params_default(snapkv_generation_params* params) {
  if (params == nullptr) return;
  const snapkv::GenerationConfig g;
  const snapkv::SamplerConfig& s = g.sampler;
  *params = snapkv_generation_params{g.max_tokens,
                                     s.temperature,
                                     s.top_p,
                                     s.top_k,
                                     s.min_p,
                                     s.repeat_penalty,
                                     s.repeat_last_n,
                                     s.presence_penalty,
                                     s.frequency_penalty,
                                     s.seed,
                                     g.ignore_eos ? 1 : 0,
                                     nullptr,
                                     0,
                                     snapkv::SessionOptions{}.prefill_chunk,
                                     nullptr,
                                     nullptr,
                                     0};
}

snapkv_status snapkv_generate(const snapkv_model* model, const char* prompt, const char* config,
                              const snapkv_generation_params* params, snapkv_piece_fn on_piece,
                              void* user, snapkv_generation_result* result) {
  return guarded([&] {
    const snapkv_model& m = model_of(model);
    snapkv_generation_params p;
    snapkv_generation_params_default(&p);
    if (params != nullptr) p = *params;
    require(p.stop != nullptr || p.n_stop == 0, "stop", "NULL with n_stop " + num(p.n_stop),
            "n_stop strings");
    snapkv::GenerationConfig g;
    g.max_tokens = p.max_tokens;
    g.sampler = snapkv::SamplerConfig{p.temperature,
                                      p.top_p,
                                      p.seed,
                                      p.top_k,
                                      p.min_p,
                                      p.repeat_penalty,
                                      p.repeat_last_n,
                                      p.presence_penalty,
                                      p.frequency_penalty};
    for (size_t i = 0; i < p.n_stop; ++i) g.stop.emplace_back(text_of(p.stop[i], "stop string"));
    require((p.logit_bias_ids != nullptr && p.logit_bias != nullptr) || p.n_logit_bias == 0,
            "logit_bias", "NULL with n_logit_bias " + num(p.n_logit_bias),
            "n_logit_bias ids and biases");
    const size_t n_vocab = m.tokenizer.n_vocab();
    require(p.n_logit_bias <= n_vocab, "n_logit_bias", num(p.n_logit_bias),
            "<= n_vocab = " + num(n_vocab));
    for (size_t i = 0; i < p.n_logit_bias; ++i) {
      require(p.logit_bias_ids[i] >= 0 && static_cast<size_t>(p.logit_bias_ids[i]) < n_vocab,
              "logit_bias_ids[" + num(i) + "]", std::to_string(p.logit_bias_ids[i]),
              "a token id < n_vocab = " + num(n_vocab));
      g.sampler.logit_bias.emplace_back(p.logit_bias_ids[i], p.logit_bias[i]);
    }
    g.ignore_eos = p.ignore_eos != 0;
    g.validate();
    const std::string text = text_of(prompt, "prompt");
    require(!text.empty(), "empty prompt", "\"\"", "a non-empty prompt");
    const std::vector<int32_t> tokens = m.tokenizer.encode(text);
    const size_t n_ctx = m.model.config().n_ctx;
    require(tokens.size() <= n_ctx, "prompt longer than the model's context",
            num(tokens.size()) + " tokens", "<= context_length = " + num(n_ctx));
    const snapkv::capi::ConfigText ct = snapkv::capi::parse_config_text(config);
    snapkv::CacheConfig c = ct.resolve(tokens.size(), std::string(snapkv::kDefaultMethod).c_str(),
                                       snapkv::kDefaultKeep);
    bool seed_given = false;
    for (const auto& [o, v] : ct.options) seed_given = seed_given || o->name == "seed";
    if (!seed_given) c.seed = p.seed;  // as `snapkv run --seed`
    snapkv::LlamaSession session(m.model, c, session_options(m, p.prefill_chunk));
    snapkv::Timer t;
    std::vector<float> logits = session.prefill(tokens);
    const double prefill_s = t.seconds();
    const snapkv::GenerationResult r = snapkv::generate(
        session, std::move(logits), m.tokenizer, g, tokens,
        [&](const snapkv::GenerationPiece& piece) {
          if (on_piece == nullptr) return true;
          return on_piece(user, piece.text.data(), piece.text.size(), piece.id) == 0;
        });
    if (result != nullptr) {
      result->prompt_tokens = tokens.size();
      result->generated_tokens = r.tokens.size();
      result->finish_reason = finish_code(r.finish);
      result->cache = snapkv::capi::to_c(session.cache_stats());
      result->prefill_s = prefill_s;
      result->decode_s = r.decode_s;
    }
  });
}

snapkv_status snapkv_doc_compress(const snapkv_model* model, const char* document,
                                  const char* config, snapkv_doc** out) {
  return guarded([&] {
    require(out != nullptr, "out", "NULL", "a pointer to receive the document");
    *out = nullptr;
    const snapkv_model& m = model_of(model);
    std::vector<int32_t> tokens = m.tokenizer.encode(text_of(document, "document"));
    require(!tokens.empty(), "empty document", "0 tokens", ">= 1 token");
    const size_t n_ctx = m.model.config().n_ctx;
    require(tokens.size() < n_ctx, "document leaves no room for a question",
            num(tokens.size()) + " tokens", "< context_length = " + num(n_ctx));
    const snapkv::CacheConfig c = snapkv::capi::parse_config_text(config).resolve(
        tokens.size(), std::string(snapkv::kDefaultDocumentMethod).c_str(), snapkv::kDefaultKeep);
    auto doc = std::make_unique<snapkv_doc>();
    doc->model = &m;
    doc->session = std::make_unique<snapkv::LlamaSession>(
        m.model, c, session_options(m, snapkv::SessionOptions{}.prefill_chunk));
    doc->session->prefill(tokens);
    doc->tokens = std::move(tokens);
    *out = doc.release();
  });
}

snapkv_status snapkv_doc_save(const snapkv_doc* doc, const char* path) {
  return guarded([&] {
    require(doc != nullptr, "doc", "NULL", "a document");
    snapkv::save_prompt_cache(text_of(path, "path"), *doc->session, doc->tokens);
  });
}

snapkv_status snapkv_doc_load(const snapkv_model* model, const char* path, snapkv_doc** out) {
  return guarded([&] {
    require(out != nullptr, "out", "NULL", "a pointer to receive the document");
    *out = nullptr;
    const snapkv_model& m = model_of(model);
    snapkv::PromptCache pc = snapkv::load_prompt_cache(
        m.model, text_of(path, "path"), session_options(m, snapkv::SessionOptions{}.prefill_chunk));
    auto doc = std::make_unique<snapkv_doc>();
    doc->model = &m;
    doc->session = std::make_unique<snapkv::LlamaSession>(std::move(pc.session));
    doc->tokens = std::move(pc.tokens);
    *out = doc.release();
  });
}

snapkv_status snapkv_doc_ask(const snapkv_doc* doc, const char* question, size_t max_tokens,
                             char* out, size_t capacity, size_t* n_out) {
  return guarded([&] {
    require(doc != nullptr, "doc", "NULL", "a document");
    require(max_tokens >= 1, "max_tokens", "0", ">= 1");
    require(n_out != nullptr, "n_out", "NULL", "a pointer to receive the length");
    const snapkv_model& m = *doc->model;
    const std::vector<int32_t> q = m.tokenizer.encode(text_of(question, "question"), false);
    require(!q.empty(), "empty question", "0 tokens", ">= 1 token");
    const size_t n_ctx = m.model.config().n_ctx;
    require(doc->tokens.size() + q.size() < n_ctx, "question does not fit after the document",
            num(doc->tokens.size()) + " + " + num(q.size()) + " tokens",
            "< context_length = " + num(n_ctx));
    snapkv::LlamaSession s = doc->session->clone();
    std::vector<float> logits = s.extend(q);
    const snapkv::GreedyAnswer a =
        snapkv::answer_greedy(s, std::move(logits), m.tokenizer, max_tokens, true);
    copy_out(a.text, out, capacity, n_out);
  });
}

snapkv_status snapkv_doc_stats(const snapkv_doc* doc, snapkv_stats* out) {
  return guarded([&] {
    require(doc != nullptr, "doc", "NULL", "a document");
    require(out != nullptr, "out", "NULL", "a snapkv_stats to fill");
    *out = snapkv::capi::to_c(doc->session->cache_stats());
  });
}

void snapkv_doc_free(snapkv_doc* doc) {
  delete doc;
}

}  // extern "C"
