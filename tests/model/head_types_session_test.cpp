// A model's head types (model/head_types.h) in the engine: the sidecar round trip and its
// refusals (another model's fingerprint, other dimensions, not a sidecar, scores out of range),
// a model without head types refusing duo- methods by name (naming snapkv find-heads), and a duo
// session handing every layer its streaming mask and keeping what the budget allows, in a
// dedicated prefill and in a fork of a shared one alike.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/golden_util.h"
#include "snapkv/gguf/fingerprint.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/head_types.h"
#include "snapkv/model/llama.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

HeadTypes types_for(const LlamaModel& m, std::vector<float> scores) {
  return HeadTypes(m.config().n_layers, m.config().n_kv_heads, gguf::fingerprint(m.file()),
                   std::move(scores), 4, 32);
}

CacheConfig duo(std::string_view method, size_t budget) {
  CacheConfig knobs;
  knobs.budget = budget;
  knobs.window = 4;
  knobs.n_sink = 2;
  knobs.duo_recent = 3;
  knobs.duo_streaming = 0.5;  // half of the golden model's 4 KV heads
  return parse_method(method, knobs).config;
}

TEST(HeadTypesModel, SidecarRoundTripAndRefusals) {
  EXPECT_EQ(head_types_sidecar_path("models/m.gguf"), "models/m.heads.gguf");
  EXPECT_EQ(head_types_sidecar_path("m.bin"), "m.bin.heads.gguf");
  std::array<uint8_t, 32> fp{};
  fp[3] = 7;
  const HeadTypes t(3, 2, fp, {0.1f, 0.9f, 0.5f, 0.0f, 1.0f, 0.3f}, 4, 32);
  const std::string path = ::testing::TempDir() + "snapkv_heads_test.heads.gguf";
  {
    const std::vector<uint8_t> b = t.to_bytes();
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(b.data(), 1, b.size(), f), b.size());
    std::fclose(f);
  }
  const HeadTypes back = HeadTypes::load(path, fp, 3, 2);
  EXPECT_TRUE(std::ranges::equal(back.scores(), t.scores()));
  EXPECT_EQ(back.n_sink(), 4u);
  EXPECT_EQ(back.recent(), 32u);
  EXPECT_EQ(back.streaming_mask(0.5), (std::vector<uint8_t>{1, 0, 0, 1, 0, 1}));
  std::array<uint8_t, 32> other = fp;
  other[0] = 1;
  try {
    HeadTypes::load(path, other, 3, 2);
    ADD_FAILURE() << "a foreign fingerprint was accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("find-heads"), std::string::npos) << e.what();
  }
  EXPECT_THROW(HeadTypes::load(path, fp, 2, 2), RuntimeError);
  EXPECT_THROW(HeadTypes(3, 2, fp, {0.1f, 0.2f}, 4, 32), std::invalid_argument);
  EXPECT_THROW(HeadTypes(1, 2, fp, {0.1f, 1.5f}, 4, 32), std::invalid_argument);
  EXPECT_THROW(HeadTypes(1, 2, fp, {0.1f, NAN}, 4, 32), std::invalid_argument);
  std::remove(path.c_str());
}

TEST(HeadTypesModel, ModelWithoutHeadTypesRefusesDuoByName) {
  const LlamaModel model = test::load_model(gguf::TensorType::f32);
  ASSERT_EQ(model.head_types(), nullptr);
  try {
    LlamaSession s(model, duo("duo-snapkv", 16), SessionOptions{});
    ADD_FAILURE() << "duo ran without head types";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("[kv] head_allocation duo (method prefix duo-) needs head types", 0), 0u)
        << m;
    EXPECT_NE(m.find("snapkv find-heads --model M.gguf"), std::string::npos) << m;
  }
  LlamaSession ok(model, duo("snapkv", 16), SessionOptions{});  // other methods still run
  // A fork of a shared prefill is refused the same way.
  CacheConfig base = duo("snapkv", 16);
  LlamaSession shared(model, base, SessionOptions{});
  shared.prefill_shared(test::golden().prompt);
  EXPECT_THROW(shared.fork(duo("duo-snapkv", 16)), std::invalid_argument);
}

TEST(HeadTypesModel, SessionsKeepWhatTheBudgetAllows) {
  LlamaModel model = test::load_model(gguf::TensorType::f32);
  const size_t n_layers = model.config().n_layers, n_kv = model.config().n_kv_heads;
  ASSERT_EQ(n_kv, 2u);
  std::vector<float> scores(n_layers * n_kv);
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = static_cast<float>(i % 2 == 0 ? 0.1 : 0.9);
  model.set_head_types(types_for(model, scores));
  const std::vector<int32_t>& prompt = test::golden().prompt;
  const size_t budget = std::max<size_t>(8, prompt.size() / 3);
  ASSERT_GT(prompt.size(), 2 * budget);
  for (const char* method : {"duo-snapkv", "duo-ada-snapkv", "duo-knorm"}) {
    const CacheConfig c = duo(method, budget);
    LlamaSession s(model, c, SessionOptions{});
    s.prefill(prompt);
    CacheConfig base = c;
    base.policy = PolicyKind::snapkv;
    base.head_allocation = HeadAllocation::uniform;
    LlamaSession shared(model, base, SessionOptions{});
    shared.prefill_shared(prompt);
    const LlamaSession f = shared.fork(c);
    for (size_t l = 0; l < n_layers; ++l) {
      const LayerCache& a = s.caches()[l];
      EXPECT_EQ(std::vector<uint8_t>(a.head_types().begin(), a.head_types().end()),
                (std::vector<uint8_t>{1, 0}));  // head 0 scores lowest in every layer
      EXPECT_EQ(a.stats().rows_kept, n_kv * budget) << method << " layer " << l;
      EXPECT_EQ(a.size(0), c.n_sink + c.duo_recent) << method << " layer " << l;
      for (size_t h = 0; h < n_kv; ++h) {
        const auto x = a.positions(h), y = f.caches()[l].positions(h);
        EXPECT_TRUE(std::ranges::equal(x, y)) << method << " layer " << l << " head " << h;
      }
    }
  }
}

}  // namespace
}  // namespace snapkv
