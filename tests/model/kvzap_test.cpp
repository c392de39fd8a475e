// KVzap's scorer (model/kvzap.h): RoPE undone exactly, the forward held to its double reference
// on the golden model's caches, the ridge fit recovering a known linear model, the sidecar
// round trip and its refusals (another model's fingerprint, other dimensions, not a sidecar), a
// model without scorer weights refusing policy kvzap by name, and a kvzap session keeping the
// rows a kvzip fork keeps when handed the same scores.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/fp32_bounds.h"
#include "model/golden_util.h"
#include "snapkv/gguf/fingerprint.h"
#include "snapkv/model/kvzap.h"
#include "snapkv/model/llama.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

using test::kU;
using test::normal;

KvzapScorer random_scorer(const KvzapDims& d, uint64_t seed, const KvzapFingerprint& fp) {
  std::vector<float> w =
      normal(d.n_layers * d.n_kv_heads * kvzap_n_features(d.head_dim), seed, 0.05f);
  return KvzapScorer(d, fp, std::move(w));
}

TEST(KvzapFeatures, UnrotateInvertsRope) {
  const std::vector<float> factors = {1.0f, 2.0f, 0.5f, 4.0f, 1.5f, 1.0f};
  for (const RopeKind kind : {RopeKind::norm, RopeKind::neox}) {
    for (const size_t n_rot : {size_t{12}, size_t{16}}) {
      const RopeParams rope{n_rot, 10000.0, 0.5, kind, n_rot == 12 ? factors.data() : nullptr};
      const size_t hd = 16, n = 9;
      const std::vector<float> x = normal(n * hd, 7 + n_rot, 1.0f);
      std::vector<int64_t> pos(n);
      for (size_t r = 0; r < n; ++r) pos[r] = static_cast<int64_t>(r * r * 37);  // up to 2368
      std::vector<float> y = x;
      for (size_t r = 0; r < n; ++r) rope_ref(y.data() + r * hd, hd, pos[r], rope);
      kvzap_unrotate(y.data(), pos.data(), n, hd, rope);
      for (size_t r = 0; r < n; ++r) {
        double norm = 0.0;
        for (size_t d = 0; d < hd; ++d) norm += std::abs(x[r * hd + d]);
        for (size_t d = 0; d < hd; ++d) {
          // Two rotations in fp32 (table values rounded, 3 roundings per product/sum each) plus
          // the rounding of the reference's output: 16u of the row's 1-norm bounds them.
          EXPECT_NEAR(y[r * hd + d], x[r * hd + d], 16.0 * kU * norm) << r << ' ' << d;
        }
      }
    }
  }
}

TEST(KvzapFeatures, SidecarPathAndFeatureLayout) {
  EXPECT_EQ(kvzap_sidecar_path("models/m.gguf"), "models/m.kvzap.gguf");
  EXPECT_EQ(kvzap_sidecar_path("m.bin"), "m.bin.kvzap.gguf");
  EXPECT_EQ(kvzap_sidecar_path(".gguf"), ".gguf.kvzap.gguf");
  const float key[3] = {1.0f, -2.0f, 0.5f};
  std::vector<float> f(kvzap_n_features(3));
  kvzap_features(f.data(), key, 3, 12, 3);
  EXPECT_EQ(f, (std::vector<float>{1.0f, -2.0f, 0.5f, 1.0f, 4.0f, 0.25f, 0.25f, 1.0f}));
}

TEST(KvzapScorer, ForwardMatchesDoubleReferenceOnModelCaches) {
  const LlamaModel model = test::load_model(gguf::TensorType::f32);
  const KvzapDims d = model.kvzap_dims();
  const KvzapScorer scorer = random_scorer(d, 3, gguf::fingerprint(model.file()));
  CacheConfig full;
  LlamaSession s(model, full, SessionOptions{});
  s.prefill(test::golden().prompt);
  const RopeParams rope = model.rope_params();
  const auto scores = scorer.score_caches(s.caches(), rope);
  ASSERT_EQ(scores.size(), d.n_layers);
  const size_t hd = d.head_dim, f = kvzap_n_features(hd);
  size_t checked = 0, inside = 0;
  for (size_t l = 0; l < d.n_layers; ++l) {
    const LayerCache& cache = s.caches()[l];
    const size_t n = cache.size();
    ASSERT_EQ(scores[l].size(), d.n_kv_heads * n);
    std::vector<float> keys(n * hd);
    for (size_t h = 0; h < d.n_kv_heads; ++h) {
      cache.read_keys(h, keys.data());
      const auto pos = cache.positions(h);
      const float* w = scorer.weights().data() + (l * d.n_kv_heads + h) * f;
      for (size_t r = 0; r < n; ++r) {
        const double ref =
            kvzap_score_ref(scorer, l, h, keys.data() + r * hd, pos[r], cache.offset(), rope);
        // Bound: |w . f| terms each carry the unrotation's error (16u of the key's 1-norm,
        // doubled for the square) plus a dot product of F terms: gamma(F + 40) * sum|w_i f_i|.
        double key_norm = 0.0, sum_abs = 0.0;
        for (size_t i = 0; i < hd; ++i) key_norm += std::abs(keys[r * hd + i]);
        for (size_t i = 0; i < hd; ++i) {
          sum_abs += std::abs(w[i]) * key_norm + std::abs(w[hd + i]) * 2.0 * key_norm * key_norm;
        }
        sum_abs += std::abs(w[2 * hd]) + std::abs(w[2 * hd + 1]);
        const double bound = static_cast<double>(f + 40) * kU * sum_abs + 4.0 * kU;
        const double got = scores[l][h * n + r];
        EXPECT_LE(std::abs(got - ref), bound * ref + 1e-12) << l << ' ' << h << ' ' << r;
        ++checked;
        inside += ref > std::exp(kKvzapLogFloor) && ref < 1.0;
      }
    }
  }
  EXPECT_GT(checked, 0u);
  EXPECT_GT(inside, checked / 2);  // most scores away from the clamps: the test sees the forward
}

TEST(KvzapFit, RecoversAKnownLinearModel) {
  const KvzapDims d{2, 2, 4};
  const size_t f = kvzap_n_features(d.head_dim);
  const std::vector<float> truth = normal(d.n_layers * d.n_kv_heads * f, 11, 0.3f);
  KvzapFit fit(d);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> key(d.head_dim), feat(f);
  for (size_t l = 0; l < d.n_layers; ++l) {
    for (size_t h = 0; h < d.n_kv_heads; ++h) {
      for (size_t r = 0; r < 400; ++r) {
        for (float& k : key) k = dist(rng);
        kvzap_features(feat.data(), key.data(), static_cast<int64_t>(r), 400, d.head_dim);
        double y = 0.0;
        for (size_t i = 0; i < f; ++i) y += truth[(l * d.n_kv_heads + h) * f + i] * feat[i];
        fit.add(l, h, feat.data(), y);
      }
      EXPECT_EQ(fit.rows(l, h), 400u);
    }
  }
  const KvzapScorer s = fit.solve(1e-9, KvzapFingerprint{});
  for (size_t i = 0; i < truth.size(); ++i) EXPECT_NEAR(s.weights()[i], truth[i], 1e-4) << i;
  EXPECT_THROW(fit.solve(0.0, KvzapFingerprint{}), std::invalid_argument);
  EXPECT_THROW(KvzapFit(d).solve(1e-3, KvzapFingerprint{}), std::invalid_argument);  // no rows
}

TEST(KvzapScorer, SidecarRoundTripAndRefusals) {
  const KvzapDims d{3, 2, 8};
  KvzapFingerprint fp{};
  fp[0] = 0xab;
  const KvzapScorer s = random_scorer(d, 9, fp);
  const std::vector<uint8_t> bytes = s.to_bytes();
  const gguf::File file = gguf::File::from_bytes(bytes);
  const KvzapScorer back = KvzapScorer::from_file(file, "x.kvzap.gguf", fp, d);
  EXPECT_TRUE(std::equal(back.weights().begin(), back.weights().end(), s.weights().begin(),
                         s.weights().end()));
  KvzapFingerprint other = fp;
  other[31] = 1;
  try {
    KvzapScorer::from_file(file, "x.kvzap.gguf", other, d);
    ADD_FAILURE() << "a foreign fingerprint was accepted";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[kv]"), std::string::npos) << m;
    EXPECT_NE(m.find("another model"), std::string::npos) << m;
    EXPECT_NE(m.find("expected"), std::string::npos) << m;
  }
  EXPECT_THROW(KvzapScorer::from_file(file, "x", fp, KvzapDims{3, 2, 16}), RuntimeError);
  EXPECT_THROW(KvzapScorer::from_file(file, "x", fp, KvzapDims{4, 2, 8}), RuntimeError);
  const LlamaModel model = test::load_model(gguf::TensorType::f32);  // a GGUF, not a sidecar
  EXPECT_THROW(KvzapScorer::from_file(model.file(), "m.gguf", fp, d), RuntimeError);
  std::vector<float> bad(s.weights().begin(), s.weights().end());
  bad[5] = std::nanf("");
  EXPECT_THROW(KvzapScorer(d, fp, bad), std::invalid_argument);
  bad.pop_back();
  EXPECT_THROW(KvzapScorer(d, fp, bad), std::invalid_argument);
}

CacheConfig kvzap_config(size_t budget) {
  CacheConfig c;
  c.policy = PolicyKind::kvzap;
  c.chunk_mode = ChunkMode::end_of_prompt;
  c.budget = budget;
  c.window = 4;
  c.n_sink = 2;
  c.pool = PoolKind::none;
  c.kernel = 1;
  return c;
}

TEST(KvzapSession, ModelWithoutWeightsRefusesKvzapByName) {
  const LlamaModel model = test::load_model(gguf::TensorType::f32);
  ASSERT_EQ(model.kvzap(), nullptr);
  try {
    LlamaSession s(model, kvzap_config(8), SessionOptions{});
    ADD_FAILURE() << "kvzap ran without scorer weights";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("[kv] policy kvzap needs scorer weights", 0), 0u) << m;
    EXPECT_NE(m.find("expected"), std::string::npos) << m;
  }
  for (const QuerySource source : {QuerySource::queries, QuerySource::keys}) {
    CacheConfig c = kvzap_config(8);
    c.policy = PolicyKind::kvzap_snapkv;  // kvzap-snapkv, kvzap-proxy
    c.query_source = source;
    try {
      LlamaSession::check_model_supports(model, c);
      ADD_FAILURE() << "kvzap_snapkv accepted without scorer weights";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("[kv] policy kvzap_snapkv needs scorer weights", 0), 0u) << m;
    }
    EXPECT_THROW(LlamaSession(model, c, SessionOptions{}), std::invalid_argument);
  }
}

// kvzap-snapkv and kvzap-proxy in the engine: a session that prefills by itself keeps what a fork
// of a shared prefill keeps (the scorer's scores and the window's queries reach both), and the
// prior changes the choice against the window alone (prior_weight 0).
TEST(KvzapSession, PriorMethodsKeepTheSameRowsDirectAndForked) {
  LlamaModel model = test::load_model(gguf::TensorType::f32);
  model.set_kvzap(random_scorer(model.kvzap_dims(), 22, gguf::fingerprint(model.file())));
  const std::vector<int32_t>& prompt = test::golden().prompt;
  const size_t budget = std::max<size_t>(8, prompt.size() / 3);
  for (const QuerySource source : {QuerySource::queries, QuerySource::keys}) {
    for (const HeadAllocation alloc : {HeadAllocation::uniform, HeadAllocation::ada}) {
      CacheConfig mix = kvzap_config(budget);
      mix.policy = PolicyKind::kvzap_snapkv;
      mix.query_source = source;
      mix.head_allocation = alloc;
      LlamaSession s(model, mix, SessionOptions{});
      s.prefill(prompt);
      CacheConfig base = mix;
      base.policy = PolicyKind::snapkv;
      base.query_source = QuerySource::auto_select;
      base.budget = prompt.size() + 1;
      base.head_allocation = HeadAllocation::uniform;
      LlamaSession shared(model, base, SessionOptions{});
      shared.prefill_shared(prompt);
      const LlamaSession f = shared.fork(mix);
      CacheConfig window_only = mix;
      window_only.prior_weight = 0.0;
      const LlamaSession w = shared.fork(window_only);
      bool differs = false;
      for (size_t l = 0; l < s.caches().size(); ++l) {
        for (size_t h = 0; h < model.config().n_kv_heads; ++h) {
          const auto a = s.caches()[l].positions(h), b = f.caches()[l].positions(h),
                     c = w.caches()[l].positions(h);
          EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << l << ' ' << h;
          differs = differs || !std::equal(a.begin(), a.end(), c.begin(), c.end());
        }
      }
      EXPECT_TRUE(differs) << "the prior changed no choice";
      EXPECT_EQ(s.caches()[0].config().policy, PolicyKind::kvzap_snapkv);
    }
  }
}

TEST(KvzapSession, SidecarBesideTheModelIsFoundOrRefused) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("snapkv_kvzap_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string model_path = (dir / "m.gguf").string();
  convert_export(test::golden_dir(), gguf::TensorType::f32).write(model_path);
  {  // absent
    const LlamaModel m = LlamaModel::load(model_path);
    EXPECT_EQ(m.kvzap(), nullptr);
    EXPECT_NE(m.kvzap_status().find("absent"), std::string::npos) << m.kvzap_status();
  }
  const LlamaModel m0 = LlamaModel::load(model_path);
  const auto write = [&](const KvzapScorer& s) {
    const std::vector<uint8_t> b = s.to_bytes();
    std::ofstream(kvzap_sidecar_path(model_path), std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  };
  KvzapFingerprint foreign = gguf::fingerprint(m0.file());
  foreign[0] ^= 1;
  write(random_scorer(m0.kvzap_dims(), 4, foreign));
  {  // another model's: the model loads, kvzap is refused with the reason
    const LlamaModel m = LlamaModel::load(model_path);
    EXPECT_EQ(m.kvzap(), nullptr);
    try {
      LlamaSession s(m, kvzap_config(8), SessionOptions{});
      ADD_FAILURE() << "a foreign sidecar was used";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("[kv]"), std::string::npos) << msg;
      EXPECT_NE(msg.find("another model"), std::string::npos) << msg;
    }
    LlamaSession ok(m, CacheConfig{}, SessionOptions{});  // other methods still run
  }
  {  // SNAPKV_KVZAP names a scorer elsewhere: it replaces the sidecar beside the model
    const std::string elsewhere = (dir / "other.kvzap.gguf").string();
    const std::vector<uint8_t> b =
        random_scorer(m0.kvzap_dims(), 5, gguf::fingerprint(m0.file())).to_bytes();
    std::ofstream(elsewhere, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    ASSERT_EQ(::setenv("SNAPKV_KVZAP", elsewhere.c_str(), 1), 0);
    const LlamaModel m = LlamaModel::load(model_path);
    ASSERT_EQ(::setenv("SNAPKV_KVZAP", (dir / "absent.gguf").c_str(), 1), 0);
    const LlamaModel none = LlamaModel::load(model_path);
    ASSERT_EQ(::unsetenv("SNAPKV_KVZAP"), 0);
    ASSERT_NE(m.kvzap(), nullptr) << m.kvzap_status();
    EXPECT_NE(m.kvzap_status().find("other.kvzap.gguf"), std::string::npos) << m.kvzap_status();
    EXPECT_EQ(none.kvzap(), nullptr);
    EXPECT_NE(none.kvzap_status().find("SNAPKV_KVZAP"), std::string::npos) << none.kvzap_status();
  }
  write(random_scorer(m0.kvzap_dims(), 4, gguf::fingerprint(m0.file())));
  {
    const LlamaModel m = LlamaModel::load(model_path);
    ASSERT_NE(m.kvzap(), nullptr) << m.kvzap_status();
    LlamaSession s(m, kvzap_config(8), SessionOptions{});
    s.prefill(test::golden().prompt);
    for (const LayerCache& c : s.caches()) EXPECT_EQ(c.size(), 8u);
  }
  fs::remove_all(dir);
}

TEST(KvzapSession, KeepsWhatKvzipKeepsWithTheSameScores) {
  LlamaModel model = test::load_model(gguf::TensorType::f32);
  model.set_kvzap(random_scorer(model.kvzap_dims(), 21, gguf::fingerprint(model.file())));
  const std::vector<int32_t>& prompt = test::golden().prompt;
  const size_t budget = std::max<size_t>(8, prompt.size() / 3);
  for (const HeadAllocation alloc : {HeadAllocation::uniform, HeadAllocation::ada}) {
    CacheConfig zap = kvzap_config(budget);
    zap.head_allocation = alloc;
    LlamaSession s(model, zap, SessionOptions{});
    s.prefill(prompt);
    // The same scores handed to a kvzip fork of a shared prefill.
    CacheConfig base = zap;
    base.policy = PolicyKind::snapkv;
    base.budget = prompt.size() + 1;
    base.head_allocation = HeadAllocation::uniform;
    LlamaSession shared(model, base, SessionOptions{});
    shared.prefill_shared(prompt);
    ReconstructionScores scores;
    scores.n_rows = prompt.size();
    scores.layers = model.kvzap()->score_caches(shared.caches(), model.rope_params());
    CacheConfig zip = zap;
    zip.policy = PolicyKind::kvzip;
    const LlamaSession z = shared.fork(zip, &scores);
    LlamaSession zf = shared.fork(zap);  // kvzap fork scores on its own
    for (size_t l = 0; l < s.caches().size(); ++l) {
      for (size_t h = 0; h < model.config().n_kv_heads; ++h) {
        const auto a = s.caches()[l].positions(h), b = z.caches()[l].positions(h),
                   c = zf.caches()[l].positions(h);
        EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << l << ' ' << h;
        EXPECT_TRUE(std::equal(a.begin(), a.end(), c.begin(), c.end())) << l << ' ' << h;
      }
    }
    EXPECT_EQ(s.caches()[0].config().policy, PolicyKind::kvzap);
  }
}

}  // namespace
}  // namespace snapkv
