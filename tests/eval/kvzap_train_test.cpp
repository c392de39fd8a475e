// KVzap's training (eval/kvzap_train.h) on the eval tests' tiny model: the data are the same bytes
// for the same seed and differ for another, the prompts come from both sources at the asked
// length, and the fit beats the best constant predictor on its own training rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "eval/tiny_model.h"
#include "snapkv/eval/harness.h"
#include "snapkv/eval/kvzap_train.h"
#include "snapkv/eval/tasks.h"
#include "snapkv/gguf/fingerprint.h"
#include "snapkv/model/kvzip.h"

namespace snapkv::eval {
namespace {

struct Fixture {
  LlamaModel model = LlamaModel::load(test::tiny_model_path());
  Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

KvzapTrainOptions small(uint64_t seed) {
  KvzapTrainOptions o;
  o.seed = seed;
  o.context_tokens = 1024;
  o.samples_per_task = 1;
  o.generic_prompts = 2;
  o.prefill_chunk = 64;
  return o;
}

std::vector<uint8_t> row_bytes(const KvzapTrainOptions& o) {
  const Fixture& f = fixture();
  const size_t n_features = kvzap_n_features(f.model.config().head_dim);
  std::vector<uint8_t> out;
  kvzap_training_rows(f.model, f.tokenizer, o,
                      [&](size_t l, size_t h, const float* features, double target) {
                        const auto put = [&](const void* p, size_t n) {
                          const auto* b = static_cast<const uint8_t*>(p);
                          out.insert(out.end(), b, b + n);
                        };
                        put(&l, sizeof l);
                        put(&h, sizeof h);
                        put(features, n_features * sizeof(float));
                        put(&target, sizeof target);
                      });
  return out;
}

TEST(KvzapTrain, PromptsComeFromTheTasksAndGenericText) {
  const auto prompts = kvzap_training_prompts(fixture().tokenizer, small(4));
  ASSERT_EQ(prompts.size(), all_tasks().size() + 2);
  for (const auto& p : prompts) {
    EXPECT_LE(p.size(), 1024u);
    EXPECT_GT(p.size(), 512u);
    EXPECT_EQ(p.front(), 1);  // BOS
  }
  EXPECT_EQ(prompts.back().size(), 1024u);  // generic text fills the budget exactly
  EXPECT_NE(prompts[prompts.size() - 1], prompts[prompts.size() - 2]);
}

TEST(KvzapTrain, SameSeedSameBytesOtherSeedOtherBytes) {
  const std::vector<uint8_t> a = row_bytes(small(4)), b = row_bytes(small(4));
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, row_bytes(small(5)));
}

TEST(KvzapTrain, TeacherKvzipPlusLearnsTheNormalisedScores) {
  const Fixture& f = fixture();
  KvzapTrainOptions o = small(4);
  o.samples_per_task = 0;
  o.generic_prompts = 1;
  // The one prompt's pass, run here directly: the rows' targets are the logs of its scores.
  const std::vector<int32_t> prompt = kvzap_training_prompts(f.tokenizer, o).front();
  for (const KvzapTeacher teacher : {KvzapTeacher::kvzip, KvzapTeacher::kvzip_plus}) {
    o.teacher = teacher;
    LlamaSession session(
        f.model, CacheConfig{},
        SessionOptions{o.prefill_chunk, ReconstructionOptions{kvzip_repeat_prompt(f.tokenizer)}});
    session.prefill(prompt);
    const ReconstructionScores scores =
        session.reconstruction_scores(teacher == KvzapTeacher::kvzip_plus);
    const size_t n_rows = scores.n_rows;
    std::vector<double> expected, got;
    for (size_t l = 0; l < scores.layers.size(); ++l) {
      for (size_t h = 0; h < f.model.config().n_kv_heads; ++h) {
        for (size_t r = 1; r < n_rows; ++r) {  // row 0 is BOS, left out
          const double s = scores.layers[l][h * n_rows + r];
          expected.push_back(std::clamp(std::log(std::max(s, 1e-30)), kKvzapLogFloor, 0.0));
        }
      }
    }
    kvzap_training_rows(f.model, f.tokenizer, o, [&](size_t, size_t, const float*, double target) {
      got.push_back(target);
    });
    EXPECT_EQ(got, expected) << (teacher == KvzapTeacher::kvzip ? "kvzip" : "kvzip_plus");
  }
  o.teacher = KvzapTeacher::kvzip;
  const std::vector<uint8_t> plain = row_bytes(o);
  o.teacher = KvzapTeacher::kvzip_plus;
  EXPECT_NE(plain, row_bytes(o));
}

TEST(KvzapTrain, TeacherQuestionsGivesEachContextRowItsShare) {
  const Fixture& f = fixture();
  KvzapTrainOptions o = small(4);
  o.teacher = KvzapTeacher::questions;
  const size_t n_kv = f.model.config().n_kv_heads, n_layers = f.model.config().n_layers;
  const size_t pos_feature = 2 * f.model.config().head_dim;  // position / context length
  // One train-split sample per task, in order; the generic prompts are not used.
  TaskOptions to;
  to.context_tokens = o.context_tokens;
  to.seed = o.seed;
  to.split = Split::train;
  const TokenCounter count = [&](std::string_view t) {
    return f.tokenizer.encode(std::string(t), false).size();
  };
  std::vector<size_t> n_context;
  for (const Task task : all_tasks()) {
    n_context.push_back(
        tokenize_prompt(f.tokenizer, generate_sample(task, to, 0, count)).context.size());
  }
  // Rows come per sample, layer, KV head and context row 1 .. n_context - 1: the shares of one
  // (sample, layer, head) sum to 1 (up to the floor's clamp) and the position feature runs over
  // the context alone.
  size_t sample = 0, row = 0, block = 0;
  double share_sum = 0.0;
  std::vector<double> sums;
  bool positions_ok = true;
  kvzap_training_rows(f.model, f.tokenizer, o, [&](size_t, size_t, const float* x, double t) {
    ASSERT_LT(sample, n_context.size());
    ASSERT_LE(t, 0.0);
    ASSERT_GE(t, kKvzapLogFloor);
    const size_t n = n_context[sample];
    const double want = static_cast<double>(row + 1) / static_cast<double>(n);
    if (std::abs(x[pos_feature] - want) > 1e-6) positions_ok = false;
    share_sum += std::exp(t);
    if (++row == n - 1) {
      sums.push_back(share_sum);
      share_sum = 0.0;
      row = 0;
      if (++block == n_layers * n_kv) {
        block = 0;
        ++sample;
      }
    }
  });
  EXPECT_EQ(sample, n_context.size());
  EXPECT_TRUE(positions_ok);
  ASSERT_EQ(sums.size(), n_context.size() * n_layers * n_kv);
  for (const double s : sums) {
    EXPECT_GT(s, 1.0 - 1e-9);
    EXPECT_LT(s, 1.0 + 1024 * std::exp(kKvzapLogFloor));
  }
  EXPECT_EQ(row_bytes(o), row_bytes(o));
  o.samples_per_task = 0;  // the generic prompts alone: no question to learn from
  EXPECT_THROW(train_kvzap(f.model, f.tokenizer, o), std::invalid_argument);
}

TEST(KvzapTrain, FitBeatsTheBestConstantOnItsRows) {
  const Fixture& f = fixture();
  const KvzapTrainOptions o = small(4);
  const KvzapScorer s = train_kvzap(f.model, f.tokenizer, o);
  EXPECT_EQ(s.fingerprint(), gguf::fingerprint(f.model.file()));
  const KvzapDims d = s.dims();
  std::vector<double> sum(d.n_layers * d.n_kv_heads), sum2(sum.size()), err(sum.size());
  std::vector<size_t> n(sum.size());
  kvzap_training_rows(f.model, f.tokenizer, o,
                      [&](size_t l, size_t h, const float* features, double target) {
                        const size_t i = l * d.n_kv_heads + h;
                        const double e = s.predict(l, h, features) - target;
                        sum[i] += target;
                        sum2[i] += target * target;
                        err[i] += e * e;
                        ++n[i];
                      });
  for (size_t i = 0; i < sum.size(); ++i) {
    ASSERT_GT(n[i], 0u);
    const double mean = sum[i] / static_cast<double>(n[i]);
    const double var = sum2[i] / static_cast<double>(n[i]) - mean * mean;
    EXPECT_LT(err[i] / static_cast<double>(n[i]), var) << "layer/head " << i;
  }
  // The fitted scorer compresses a prompt through the engine.
  LlamaModel model = LlamaModel::load(test::tiny_model_path());
  model.set_kvzap(s);
  CacheConfig c;
  c.policy = PolicyKind::kvzap;
  c.budget = 40;
  LlamaSession session(model, c, SessionOptions{});
  session.prefill(kvzap_training_prompts(f.tokenizer, o).front());
  for (const LayerCache& cache : session.caches()) EXPECT_EQ(cache.size(), 40u);
}

TEST(KvzapTrain, RefusesBadOptions) {
  const Fixture& f = fixture();
  KvzapTrainOptions o = small(4);
  o.context_tokens = 1025;  // past the model's 1024
  EXPECT_THROW(train_kvzap(f.model, f.tokenizer, o), std::invalid_argument);
  o = small(4);
  o.samples_per_task = 0;
  o.generic_prompts = 0;
  EXPECT_THROW(train_kvzap(f.model, f.tokenizer, o), std::invalid_argument);
  o = small(uint64_t{1} << 63);
  EXPECT_THROW(train_kvzap(f.model, f.tokenizer, o), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv::eval
