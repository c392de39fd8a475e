// The C ABI's logit bias, ignore_eos and piece token ids (include/snapkv/snapkv.h,
// snapkv_generation_params): a +100 bias on the end token ends the generation at once, ignore_eos
// bans it so the same call runs to max_tokens, -INFINITY bans a token, and bad arrays are a status
// with a named message.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/snapkv.h"

namespace {

const std::string kModel = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

struct Outcome {
  snapkv_status status = SNAPKV_OK;
  std::vector<int32_t> tokens;
  snapkv_generation_result result{};
};

int collect(void* user, const char*, size_t, int32_t token) {
  static_cast<std::vector<int32_t>*>(user)->push_back(token);
  return 0;
}

Outcome generate(snapkv_model* m, const snapkv_generation_params& p) {
  Outcome r;
  r.status =
      snapkv_generate(m, "Once upon a time", "method=full", &p, collect, &r.tokens, &r.result);
  return r;
}

TEST(CApiLogitBias, BiasBansAndIgnoreEos) {
  snapkv_model* m = nullptr;
  ASSERT_EQ(snapkv_model_load(kModel.c_str(), &m), SNAPKV_OK) << snapkv_last_error();
  // The end token, from the C++ side (the ABI does not name special tokens).
  const snapkv::LlamaModel model = snapkv::LlamaModel::load(kModel);
  const int32_t eos = snapkv::Tokenizer::from_gguf(model.file()).eos();

  snapkv_generation_params p;
  snapkv_generation_params_default(&p);
  EXPECT_EQ(p.n_logit_bias, 0u);
  EXPECT_EQ(p.logit_bias_ids, nullptr);
  p.max_tokens = 6;
  const Outcome plain = generate(m, p);
  ASSERT_EQ(plain.status, SNAPKV_OK) << snapkv_last_error();
  // Every piece names the token it came from: one piece per token without stop strings.
  ASSERT_EQ(plain.tokens.size(), plain.result.generated_tokens)
      << "finish " << plain.result.finish_reason;
  ASSERT_FALSE(plain.tokens.empty());
  for (int32_t t : plain.tokens) EXPECT_GE(t, 0);

  const float up = 100.0f;
  p.logit_bias_ids = &eos;
  p.logit_bias = &up;
  p.n_logit_bias = 1;
  const Outcome ends = generate(m, p);
  ASSERT_EQ(ends.status, SNAPKV_OK) << snapkv_last_error();
  EXPECT_EQ(ends.result.finish_reason, SNAPKV_FINISH_STOP);
  EXPECT_EQ(ends.result.generated_tokens, 0u);
  p.ignore_eos = 1;
  const Outcome runs = generate(m, p);
  ASSERT_EQ(runs.status, SNAPKV_OK) << snapkv_last_error();
  EXPECT_EQ(runs.result.finish_reason, SNAPKV_FINISH_LENGTH);
  EXPECT_EQ(runs.result.generated_tokens, 6u);
  for (int32_t t : runs.tokens) EXPECT_NE(t, eos);

  p.ignore_eos = 0;
  const float ban = -INFINITY;
  p.logit_bias_ids = &plain.tokens[0];
  p.logit_bias = &ban;
  const Outcome banned = generate(m, p);
  ASSERT_EQ(banned.status, SNAPKV_OK) << snapkv_last_error();
  ASSERT_FALSE(banned.tokens.empty());
  EXPECT_NE(banned.tokens[0], plain.tokens[0]);

  // Misuse: NULL arrays with a count, an id outside the vocabulary, a NaN bias.
  p.logit_bias_ids = nullptr;
  EXPECT_NE(generate(m, p).status, SNAPKV_OK);
  EXPECT_NE(std::string(snapkv_last_error()).find("logit_bias"), std::string::npos);
  const int32_t far = 1 << 30;
  p.logit_bias_ids = &far;
  EXPECT_NE(generate(m, p).status, SNAPKV_OK);
  EXPECT_NE(std::string(snapkv_last_error()).find("logit_bias_ids[0]"), std::string::npos);
  const float nan = NAN;
  p.logit_bias_ids = &eos;
  p.logit_bias = &nan;
  EXPECT_NE(generate(m, p).status, SNAPKV_OK);
  EXPECT_NE(std::string(snapkv_last_error()).find("not a number"), std::string::npos);
  snapkv_model_free(m);
}

}  // namespace
