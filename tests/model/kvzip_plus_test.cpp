// KVzip+ (policy kvzip_plus, model/kvzip.h): the weighted max-attention kernel against a double
// reference and against the plain kernel, the value output norms against a direct double
// computation, and a kvzip_plus session that keeps the rows of its own scores, refuses plain
// KVzip scores, and round-trips through .kvc.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstring>

#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/fp32_bounds.h"
#include "model/golden_util.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/prompt_cache.h"

namespace snapkv {
namespace {

using test::gamma;
using test::kU;
using test::normal;

using test::golden;
using test::load_model;

TEST(KvzipPlusKernel, WeightedMaximaPerQueryHead) {
  const size_t n_rows = 29, n_group = 3, n_q = 21, hd = 16;
  const auto keys = normal(n_rows * hd, 11, 1.0f);
  const auto own = normal(n_q * hd, 12, 1.0f);
  const auto q = normal(n_group * n_q * hd, 13, 1.2f);
  std::vector<float> weight(n_q);
  for (size_t i = 0; i < n_q; ++i) weight[i] = 1.0f / (1.0f + 0.5f * static_cast<float>(i));
  std::vector<float> got(n_group * n_rows, 0.0f);
  std::vector<double> ref(n_group * n_rows, 0.0);
  reconstruction_max_weighted_attention(got.data(), keys.data(), n_rows, q.data(), n_group, n_q,
                                        own.data(), hd, weight.data());
  reconstruction_max_attention_ref(ref.data(), keys.data(), n_rows, q.data(), n_group, n_q,
                                   own.data(), hd, weight.data());
  // The plain kernel's bound (kvzip_test.cpp) plus one rounding for the weight.
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  double max_terms = 0.0;
  for (size_t r = 0; r < n_group * n_q; ++r) {
    for (size_t j = 0; j < n_rows + n_q; ++j) {
      const float* k = j < n_rows ? keys.data() + j * hd : own.data() + (j - n_rows) * hd;
      double s = 0.0;
      for (size_t d = 0; d < hd; ++d) s += std::fabs(static_cast<double>(q[r * hd + d]) * k[d]);
      max_terms = std::max(max_terms, s * scale);
    }
  }
  const double rel = 2.0 * gamma(hd) * max_terms + 4.0 * kU + gamma(n_rows + n_q) + kU + 2.0 * kU;
  for (size_t j = 0; j < n_group * n_rows; ++j) {
    EXPECT_NEAR(got[j], ref[j], rel * ref[j] + 1e-30) << "entry " << j;
    EXPECT_GT(ref[j], 0.0);
  }
  // Weights of 1: per query head, and the max over the heads is the plain kernel's, bit for bit.
  const std::vector<float> ones(n_q, 1.0f);
  std::vector<float> per_head(n_group * n_rows, 0.0f), plain(n_rows, 0.0f);
  reconstruction_max_weighted_attention(per_head.data(), keys.data(), n_rows, q.data(), n_group,
                                        n_q, own.data(), hd, ones.data());
  reconstruction_max_attention(plain.data(), keys.data(), n_rows, q.data(), n_group, n_q,
                               own.data(), hd);
  for (size_t j = 0; j < n_rows; ++j) {
    float m = 0.0f;
    for (size_t g = 0; g < n_group; ++g) m = std::max(m, per_head[g * n_rows + j]);
    EXPECT_EQ(m, plain[j]) << "row " << j;
  }
  float out = 0.0f;
  EXPECT_THROW(reconstruction_max_weighted_attention(&out, keys.data(), 1, q.data(), 1, 1,
                                                     own.data(), hd, nullptr),
               std::invalid_argument);
}

TEST(KvzipPlusKernel, ValueOutputNormsMatchADirectProduct) {
  const size_t n_embd = 48, n_heads = 4, n_kv = 2, hd = 8, n_rows = 13;
  const size_t q_dim = n_heads * hd;
  const auto wo = normal(n_embd * q_dim, 21, 0.3f);
  const auto values = normal(n_kv * n_rows * hd, 22, 1.0f);
  std::vector<float> got(n_heads * n_rows);
  value_output_norms(got.data(), wo.data(), n_embd, n_heads, n_kv, hd, values.data(), n_rows);
  for (size_t h = 0; h < n_heads; ++h) {
    const float* vh = values.data() + (h / (n_heads / n_kv)) * n_rows * hd;
    for (size_t j = 0; j < n_rows; ++j) {
      const float* v = vh + j * hd;
      double sq = 0.0, bound = 0.0;  // ||W v||^2, and sum_de |v_d| |v_e| sum_r |W_rd| |W_re|
      for (size_t r = 0; r < n_embd; ++r) {
        double y = 0.0, a = 0.0;
        for (size_t d = 0; d < hd; ++d) {
          const double w = wo[r * q_dim + h * hd + d];
          y += w * v[d];
          a += std::fabs(w * v[d]);
        }
        sq += y * y;
        bound += a * a;
      }
      // Gram entries (n_embd terms), then two dots of hd terms, then the square root.
      const double err_sq = (gamma(n_embd) + 2.0 * gamma(hd) + 3.0 * kU) * bound;
      const double want = std::sqrt(sq);
      EXPECT_NEAR(got[h * n_rows + j], want, err_sq / (2.0 * want) + 2.0 * kU * want)
          << "head " << h << " row " << j;
    }
  }
  EXPECT_THROW(value_output_norms(got.data(), wo.data(), n_embd, 3, 2, hd, values.data(), 1),
               std::invalid_argument);
}

CacheConfig plus_config(size_t budget) {
  CacheConfig c = parse_method("kvzip_plus", CacheConfig{}).config;
  c.budget = budget;
  c.window = 4;
  c.n_sink = 2;
  return c;
}

TEST(KvzipPlusPass, KeepsTheRowsOfItsOwnScores) {
  const LlamaModel model = load_model(gguf::TensorType::f32);
  const std::vector<int32_t>& prompt = golden().prompt;
  const size_t budget = prompt.size() / 2;
  ReconstructionOptions chunks;
  chunks.chunk = 7;
  chunks.overlap = 3;
  LlamaSession shared(model, plus_config(budget), SessionOptions{7, chunks});
  shared.prefill_shared(prompt);
  const ReconstructionScores plus = shared.reconstruction_scores(true);
  const ReconstructionScores plain = shared.reconstruction_scores(false);
  EXPECT_TRUE(plus.normalized);
  EXPECT_FALSE(plain.normalized);
  ASSERT_EQ(plus.layers.size(), plain.layers.size());
  // Not the plain scores scaled by one factor: the ranking within a head changes somewhere.
  bool reordered = false;
  for (size_t l = 0; l < plus.layers.size() && !reordered; ++l) {
    const std::vector<float>& a = plus.layers[l];
    const std::vector<float>& b = plain.layers[l];
    for (size_t j = 1; j < plus.n_rows && !reordered; ++j) {
      reordered = (a[j] > a[j - 1]) != (b[j] > b[j - 1]);
    }
  }
  EXPECT_TRUE(reordered);

  LlamaSession dedicated(model, plus_config(budget), SessionOptions{7, chunks});
  dedicated.prefill(prompt);
  ASSERT_NE(dedicated.reconstruction(), nullptr);
  EXPECT_TRUE(dedicated.reconstruction()->normalized);
  for (size_t l = 0; l < plus.layers.size(); ++l) {
    EXPECT_EQ(0, std::memcmp(dedicated.reconstruction()->layers[l].data(), plus.layers[l].data(),
                             plus.layers[l].size() * sizeof(float)))
        << "layer " << l;
  }
  EXPECT_EQ(dedicated.caches().front().size(), budget);
  // A fork handed the other kind of scores is refused by name.
  try {
    shared.fork(plus_config(budget), &plain);
    ADD_FAILURE() << "plain KVzip scores accepted by a kvzip_plus fork";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("KVzip+ scores"), std::string::npos) << e.what();
  }

  // .kvc: saved and loaded, the next logits are the same bits.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kvzip_plus_" + std::to_string(getpid()) + ".kvc"))
          .string();
  save_prompt_cache(path, dedicated, prompt);
  PromptCache loaded = load_prompt_cache(model, path);
  std::filesystem::remove(path);
  EXPECT_EQ(loaded.config.policy, PolicyKind::kvzip_plus);
  LlamaSession a = dedicated.clone();
  const std::vector<float> la = a.decode(prompt.back());
  const std::vector<float> lb = loaded.session.decode(prompt.back());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
}

TEST(KvzipPlusMethod, NamesAndPrefixes) {
  EXPECT_EQ(parse_method("kvzip_plus", CacheConfig{}).config.policy, PolicyKind::kvzip_plus);
  const CacheConfig ada = parse_method("ada-kvzip_plus+kivi2", CacheConfig{}).config;
  EXPECT_EQ(ada.policy, PolicyKind::kvzip_plus);
  EXPECT_EQ(ada.head_allocation, HeadAllocation::ada);
  EXPECT_EQ(parse_policy("kvzip_plus"), PolicyKind::kvzip_plus);
  EXPECT_EQ(to_string(PolicyKind::kvzip_plus), "kvzip_plus");
}

}  // namespace
}  // namespace snapkv
