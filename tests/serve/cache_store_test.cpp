// The store of prefilled prompts on its own: LRU eviction by entries and by bytes (the most
// recently used survive, an entry alone over the byte limit is not held), content ids that
// change with any token or option, the longest common prefix found for prefix reuse, and the
// shared-store payload: encoded and decoded bit for bit, every damage (magic, sizes, metadata,
// logits count, cache bytes, trailing bytes) refused.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "eval/tiny_model.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/serve/cache_store.h"

namespace snapkv::serve {
namespace {

using test::tiny_model;

std::shared_ptr<StoredPrompt> prefilled(const std::string& text, const std::string& method,
                                        bool document) {
  const auto& m = tiny_model();
  CacheConfig config = parse_method(method, CacheConfig{}).config;
  config.window = 8;
  const std::vector<int32_t> tokens = m.tokenizer.encode(text, true);
  config.budget = budget_for(0.5, tokens.size(), config);
  LlamaSession session(m.model, config);
  std::vector<float> logits = session.prefill(tokens);
  const CacheStats stats = session.cache_stats();
  return std::make_shared<StoredPrompt>(
      StoredPrompt{content_id(model_fingerprint(m.model), tokens, config), tokens, config, method,
                   std::move(session), document ? std::vector<float>{} : std::move(logits),
                   document, stats.bytes_stored, stats.bytes_full_fp16, "", 0});
}

TEST(CacheStore, EvictsTheLeastRecentlyUsedByCountAndBytes) {
  const auto a = prefilled("The grass is green and the sky is blue.", "snapkv", false);
  const auto b = prefilled("Boats float on the water of the lake.", "snapkv", false);
  const auto c = prefilled("Trees grow tall in the old forest here.", "snapkv", false);
  CacheStore by_count(tiny_model().model, {}, StoreLimits{2, size_t{1} << 30}, "", nullptr);
  by_count.put(a);
  by_count.put(b);
  ASSERT_NE(by_count.get(a->id), nullptr);  // a is now the most recent
  by_count.put(c);
  EXPECT_EQ(by_count.memory_entries(), 2u);
  EXPECT_NE(by_count.get(a->id), nullptr);
  EXPECT_EQ(by_count.get(b->id), nullptr);
  EXPECT_NE(by_count.get(c->id), nullptr);

  const size_t two = a->memory_bytes() + c->memory_bytes();
  CacheStore by_bytes(tiny_model().model, {}, StoreLimits{100, two}, "", nullptr);
  by_bytes.put(a);
  by_bytes.put(c);
  EXPECT_EQ(by_bytes.memory_entries(), 2u);
  by_bytes.put(b);
  EXPECT_LE(by_bytes.memory_bytes(), two);
  EXPECT_EQ(by_bytes.get(a->id), nullptr);
  EXPECT_NE(by_bytes.get(b->id), nullptr);

  CacheStore tiny(tiny_model().model, {}, StoreLimits{100, a->memory_bytes() - 1}, "", nullptr);
  tiny.put(a);
  EXPECT_EQ(tiny.memory_entries(), 0u);
  EXPECT_EQ(tiny.memory_bytes(), 0u);
}

// find_prefix: the entry sharing the longest common token prefix wins, whether it is a strict
// prefix of the new prompt or diverges after it; the prefix must reach min_tokens and leave at
// least one token to run; a compressed entry or another config never matches.
TEST(CacheStore, FindPrefixTakesTheLongestCommonPrefix) {
  const std::string doc = "The grass is green and the sky is blue. The pass key is 48213.";
  const auto strict = prefilled(doc, "full", false);
  const auto diverging = prefilled(doc + " Boats float on the water of the lake.", "full", false);
  const auto compressed =
      prefilled(doc + " Boats float on the water, said the man.", "snapkv", false);
  CacheStore store(tiny_model().model, {}, StoreLimits{}, "", nullptr);
  for (const auto& e : {strict, diverging, compressed}) store.put(e);
  const std::vector<int32_t> asked =
      tiny_model().tokenizer.encode(doc + " Boats float on the water, said the woman.", true);
  size_t common = 0;
  while (common < asked.size() && common < diverging->tokens.size() &&
         asked[common] == diverging->tokens[common]) {
    ++common;
  }
  ASSERT_GT(common, strict->tokens.size()) << "the test needs a longer diverging match";
  ASSERT_LT(common, diverging->tokens.size());

  const CacheStore::PrefixMatch m = store.find_prefix(asked, strict->config, 1);
  EXPECT_EQ(m.entry, diverging);
  EXPECT_EQ(m.tokens, common);
  // A minimum above the longest common prefix: nothing.
  EXPECT_EQ(store.find_prefix(asked, strict->config, common + 1).entry, nullptr);
  // The stored prompt itself, asked again: all but its last token (one is always left to run).
  const CacheStore::PrefixMatch self = store.find_prefix(diverging->tokens, strict->config, 1);
  EXPECT_EQ(self.tokens, diverging->tokens.size() - 1);
  // A compressed config is never served by a prefix, nor is a full one by a compressed entry.
  EXPECT_EQ(store.find_prefix(asked, compressed->config, 1).entry, nullptr);
  CacheStore only_compressed(tiny_model().model, {}, StoreLimits{}, "", nullptr);
  only_compressed.put(compressed);
  EXPECT_EQ(only_compressed.find_prefix(asked, strict->config, 1).entry, nullptr);
}

TEST(CacheStore, ContentIdsChangeWithTokensAndOptions) {
  const ModelFingerprint fp = model_fingerprint(tiny_model().model);
  CacheConfig config = parse_method("snapkv", CacheConfig{}).config;
  const std::vector<int32_t> t = {1, 5, 9, 12};
  const std::string id = content_id(fp, t, config);
  EXPECT_EQ(id, content_id(fp, t, config));
  EXPECT_EQ(id.size(), 3u + 32u);
  EXPECT_NE(id, content_id(fp, std::vector<int32_t>{1, 5, 9, 13}, config));
  CacheConfig other = config;
  other.budget += 1;
  EXPECT_NE(id, content_id(fp, t, other));
  other = config;
  other.window += 1;
  EXPECT_NE(id, content_id(fp, t, other));
  ModelFingerprint fp2 = fp;
  fp2[0] ^= 1;
  EXPECT_NE(id, content_id(fp2, t, config));
}

TEST(CacheStore, SharedPayloadRoundTripsAndRefusesDamage) {
  const auto& m = tiny_model();
  CacheStore store(m.model, {}, StoreLimits{}, "", nullptr);
  const auto e = prefilled("The pass key is 48213. Remember it.", "snapkv+kivi2", false);
  const std::vector<uint8_t> bytes = CacheStore::encode(*e);
  const std::shared_ptr<StoredPrompt> back = store.decode(e->id, bytes);
  EXPECT_EQ(back->tokens, e->tokens);
  EXPECT_EQ(back->logits, e->logits);
  EXPECT_EQ(back->method, "snapkv+kivi2");
  EXPECT_FALSE(back->document);
  EXPECT_EQ(back->kv_bytes, e->kv_bytes);
  // The decoded session decodes like the original.
  LlamaSession s1 = e->session.clone(), s2 = back->session.clone();
  EXPECT_EQ(s1.decode(7), s2.decode(7));

  EXPECT_THROW(store.decode("kv-other", bytes), StoreError);  // metadata of another id
  auto damaged = [&](auto change) {
    std::vector<uint8_t> b = bytes;
    change(b);
    return b;
  };
  const size_t logits_count_at = bytes.size() - 4 * m.model.config().n_vocab - 8;
  const std::vector<std::vector<uint8_t>> bad = {
      damaged([](auto& b) { b[0] ^= 1; }),                 // magic
      damaged([](auto& b) { b.resize(b.size() / 2); }),    // cut short
      damaged([](auto& b) { b.push_back(0); }),            // trailing byte
      damaged([](auto& b) { b[8] = 0xff; }),               // metadata size
      damaged([](auto& b) { b[16] = '['; }),               // metadata text
      damaged([&](auto& b) { b[logits_count_at] ^= 1; }),  // logits count
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_THROW(store.decode(e->id, bad[i]), StoreError) << i;
  }
  // A flipped byte inside the .kvc: its own checksum refuses it.
  std::vector<uint8_t> b = bytes;
  b[logits_count_at - 100] ^= 1;
  EXPECT_THROW(store.decode(e->id, b), KvcError);
}

}  // namespace
}  // namespace snapkv::serve
