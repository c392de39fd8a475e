// Past the model's context (LlamaSession, kv/core/prefill_plan.h reindex / long_prompt): a random
// model with a 64-token context runs a 192-token prompt and a generation past it with streaming
// and with snapkv in every_chunk mode, keeping every position inside the context and giving the
// same tokens run after run; the full cache and end_of_prompt prompts are refused as before,
// quantized keys by name; a .kvc saved after re-indexing goes on identically; batched decode
// equals solo decode across re-indexing.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "plain_config.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/prompt_cache_bytes.h"
#include "snapkv/model/random_model.h"
#include "snapkv/model/sampler.h"

namespace snapkv {
namespace {

constexpr size_t kCtx = 64, kVocab = 50;

const LlamaModel& model() {
  static const LlamaModel m = [] {
    RandomModelSpec spec;
    spec.n_layers = 2;
    spec.n_embd = 64;
    spec.n_heads = 4;
    spec.n_kv_heads = 2;
    spec.n_ff = 96;
    spec.n_vocab = kVocab;
    spec.n_ctx = kCtx;
    spec.type = gguf::TensorType::f32;
    spec.seed = 3;
    return LlamaModel(make_random_model(spec));
  }();
  return m;
}

std::vector<int32_t> prompt_of(size_t n, uint32_t seed) {
  std::vector<int32_t> p(n);
  uint32_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<int32_t>((x >> 8) % kVocab);
  }
  return p;
}

CacheConfig streaming() {
  CacheConfig c = test::plain_config();  // every_chunk
  c.policy = PolicyKind::streaming;
  c.budget = 24;
  c.n_sink = 4;
  c.window = 8;
  return c;
}

CacheConfig snapkv_every_chunk() {
  CacheConfig c = test::plain_config();
  c.policy = PolicyKind::snapkv;
  c.budget = 24;
  c.window = 8;
  return c;
}

// Greedy tokens of `n` steps after the prompt; checks every position stays inside the context.
std::vector<int32_t> run(const CacheConfig& config, const std::vector<int32_t>& prompt, size_t n) {
  LlamaSession s(model(), config, SessionOptions{16});
  std::vector<float> logits = s.prefill(prompt);
  EXPECT_LE(s.next_position(), kCtx);
  std::vector<int32_t> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(argmax(logits));
    logits = s.decode(out.back());
    EXPECT_LE(s.next_position(), kCtx);
    for (const LayerCache& cache : s.caches()) {
      for (size_t h = 0; h < cache.dims().n_kv_heads; ++h) {
        for (const int64_t p : cache.positions(h)) EXPECT_LT(p, static_cast<int64_t>(kCtx));
      }
    }
  }
  EXPECT_EQ(s.n_past(), prompt.size() + n);
  return out;
}

TEST(LongContext, StreamingAndSnapkvEveryChunkRunThreeTimesTheContext) {
  const std::vector<int32_t> prompt = prompt_of(3 * kCtx, 1);
  for (const CacheConfig& config : {streaming(), snapkv_every_chunk()}) {
    SCOPED_TRACE(to_string(config.policy));
    // 60 steps past a 192-token prompt: generation crosses the context again (24 rows + 60).
    CacheConfig with_decode = config;
    with_decode.decode_budget = 32;
    with_decode.decode_interval = 8;
    const std::vector<int32_t> a = run(with_decode, prompt, 60);
    const std::vector<int32_t> b = run(with_decode, prompt, 60);
    EXPECT_EQ(a, b);
    // Without a decode-time budget the rows grow with the generation: it goes on until they
    // fill the context (24 kept + up to 40 generated), then decode() refuses by name.
    LlamaSession s(model(), config, SessionOptions{16});
    std::vector<float> logits = s.prefill(prompt);
    EXPECT_EQ(s.caches()[0].size(), 24u);
    size_t steps = 0;
    while (s.position_for(1)) {
      logits = s.decode(argmax(logits));
      ++steps;
    }
    EXPECT_EQ(steps, kCtx - 24);
    try {
      s.decode(argmax(logits));
      FAIL() << "decode past a context full of rows";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("context full of retained rows"), std::string::npos)
          << e.what();
    }
  }
}

TEST(LongContext, FullCacheAndEndOfPromptRefuseALongPromptAsBefore) {
  const std::vector<int32_t> prompt = prompt_of(kCtx + 1, 2);
  CacheConfig full = test::plain_config();
  full.policy = PolicyKind::full;
  CacheConfig end_of_prompt = streaming();
  end_of_prompt.chunk_mode = ChunkMode::end_of_prompt;
  for (const CacheConfig& config : {full, end_of_prompt}) {
    LlamaSession s(model(), config, SessionOptions{16});
    try {
      s.prefill(prompt);
      FAIL() << "a prompt longer than the context ran";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("prompt longer than the context"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("context_length = 64"), std::string::npos);
    }
  }
  // The full cache still stops decoding at the context.
  LlamaSession s(model(), full, SessionOptions{16});
  std::vector<float> logits = s.prefill(prompt_of(kCtx, 3));
  EXPECT_FALSE(s.position_for(1));
  EXPECT_THROW(s.decode(argmax(logits)), std::invalid_argument);
  // end_of_prompt: a prompt within the context is compressed once, and decoding then re-indexes.
  LlamaSession e(model(), end_of_prompt, SessionOptions{16});
  logits = e.prefill(prompt_of(kCtx - 4, 4));
  for (size_t i = 0; i < 20; ++i) logits = e.decode(argmax(logits));
  EXPECT_EQ(e.n_past(), kCtx + 16);
  EXPECT_LE(e.next_position(), kCtx);
}

TEST(LongContext, QuantizedKeysAreRefusedByName) {
  CacheConfig kivi = streaming();
  kivi.codec = CodecKind::kivi2;
  LlamaSession s(model(), kivi, SessionOptions{16});
  try {
    s.prefill(prompt_of(2 * kCtx, 5));
    FAIL() << "kivi2 keys past the context";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("keys stored quantized"), std::string::npos) << e.what();
  }
  // Within the context the codec works as always.
  LlamaSession ok(model(), kivi, SessionOptions{16});
  EXPECT_NO_THROW(ok.prefill(prompt_of(kCtx - 8, 5)));
}

TEST(LongContext, BudgetThatLeavesNoRoomForAChunkIsRefused) {
  CacheConfig big = streaming();
  big.budget = 56;  // + a 16-token chunk > 64
  LlamaSession s(model(), big, SessionOptions{16});
  EXPECT_THROW(s.prefill(prompt_of(2 * kCtx, 6)), std::invalid_argument);
}

TEST(LongContext, KvcSavedAfterReindexingContinuesIdentically) {
  const std::vector<int32_t> prompt = prompt_of(3 * kCtx + 5, 7);
  for (const CacheConfig& config : {streaming(), snapkv_every_chunk()}) {
    LlamaSession s(model(), config, SessionOptions{16});
    std::vector<float> logits = s.prefill(prompt);
    ASSERT_LT(s.next_position(), s.n_past());  // re-indexed
    const std::vector<uint8_t> bytes = encode_prompt_cache(s, prompt);
    PromptCache loaded = decode_prompt_cache(model(), bytes);
    EXPECT_EQ(loaded.session.n_past(), s.n_past());
    EXPECT_EQ(loaded.session.next_position(), s.next_position());
    std::vector<float> la = logits, lb = logits;
    // After the prompt next_position() >= 32 (24 rows, then at least the last 8-row window), so
    // 38 steps cross the context again, and 24 + 38 rows still fit it.
    size_t reindexed = 0;
    for (size_t i = 0; i < 38; ++i) {
      const int32_t t = argmax(la);
      const size_t before = s.next_position();
      la = s.decode(t);
      lb = loaded.session.decode(t);
      ASSERT_EQ(la, lb) << "step " << i;
      ASSERT_EQ(s.next_position(), loaded.session.next_position());
      if (s.next_position() < before) ++reindexed;
    }
    EXPECT_EQ(reindexed, 1u);
  }
}

TEST(LongContext, BatchedDecodeEqualsSoloDecodeAcrossReindexing) {
  // F32 weights, B = 2 < kGemmMinTokens: the batched products have the per-row gemv's bits.
  std::vector<LlamaSession> solo, batched;
  std::vector<std::vector<float>> logits;
  const std::vector<CacheConfig> configs = {streaming(), snapkv_every_chunk()};
  const std::vector<size_t> lengths = {2 * kCtx + 3, 3 * kCtx - 10};
  for (size_t b = 0; b < 2; ++b) {
    solo.emplace_back(model(), configs[b], SessionOptions{16});
    logits.push_back(solo.back().prefill(prompt_of(lengths[b], static_cast<uint32_t>(10 + b))));
    batched.push_back(solo.back().clone());
  }
  std::vector<LlamaSession*> ptrs = {&batched[0], &batched[1]};
  for (size_t step = 0; step < 40; ++step) {  // both cross the context during the steps
    const std::vector<int32_t> tokens = {argmax(logits[0]), argmax(logits[1])};
    const std::vector<float> both = LlamaSession::decode_batch(ptrs, tokens);
    for (size_t b = 0; b < 2; ++b) {
      logits[b] = solo[b].decode(tokens[b]);
      ASSERT_EQ(std::vector<float>(both.begin() + static_cast<std::ptrdiff_t>(b * kVocab),
                                   both.begin() + static_cast<std::ptrdiff_t>((b + 1) * kVocab)),
                logits[b])
          << "session " << b << " step " << step;
      ASSERT_EQ(batched[b].next_position(), solo[b].next_position());
    }
  }
  EXPECT_LT(solo[0].next_position(), solo[0].n_past());
}

TEST(LongContext, ExtendGoesPastTheContext) {
  LlamaSession s(model(), streaming(), SessionOptions{16});
  s.prefill(prompt_of(2 * kCtx, 12));
  EXPECT_NO_THROW(s.extend(prompt_of(30, 13)));
  EXPECT_EQ(s.n_past(), 2 * kCtx + 30);
  EXPECT_LE(s.next_position(), kCtx);
}

}  // namespace
}  // namespace snapkv
