// KVzip's reconstruction pass (model/kvzip.h): the max-attention kernel against a double
// reference, the whole pass against a double-precision forward of the golden tiny model, the
// cache left bit-identical by the pass (only the selection that follows drops rows), and forks,
// reused scores and dedicated sessions agreeing bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "model/fp32_bounds.h"
#include "model/golden_util.h"
#include "snapkv/kv/core/snapkv_score.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/sampler.h"

namespace snapkv {
namespace {

using test::gamma;
using test::kU;
using test::normal;

using test::golden;
using test::load_model;

// Relative error bound of one probability: the fp32 logits err by at most
// gamma(head_dim) * sum|q_d k_d| * scale (absolute), which moves p by a factor e^(2 * that);
// exp_approx adds 4u per term and the sum of n terms gamma(n), the final product u.
double probability_bound(double max_abs_logit_terms, size_t head_dim, size_t n_terms) {
  return 2.0 * gamma(head_dim) * max_abs_logit_terms + 4.0 * kU + gamma(n_terms) + kU;
}

TEST(KvzipKernel, MatchesDoubleReference) {
  const size_t n_rows = 37, n_group = 2, n_q = 45, hd = 16;
  const auto keys = normal(n_rows * hd, 1, 1.0f);
  const auto own = normal(n_q * hd, 2, 1.0f);
  const auto q = normal(n_group * n_q * hd, 3, 1.5f);  // peaked: logits up to ~10
  std::vector<float> got(n_rows, 0.0f);
  std::vector<double> ref(n_rows, 0.0);
  reconstruction_max_attention(got.data(), keys.data(), n_rows, q.data(), n_group, n_q, own.data(),
                               hd);
  reconstruction_max_attention_ref(ref.data(), keys.data(), n_rows, q.data(), n_group, n_q,
                                   own.data(), hd);
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
  const double rel = probability_bound(max_terms, hd, n_rows + n_q);
  for (size_t j = 0; j < n_rows; ++j) {
    EXPECT_NEAR(got[j], ref[j], rel * ref[j] + 1e-30) << "row " << j;
    EXPECT_GT(ref[j], 0.0);
    EXPECT_LE(ref[j], 1.0);
  }
  // The bound has the power to fail: leaving the chunk's own keys out of the softmax (a plausible
  // bug) moves some score far beyond it.
  std::vector<double> wrong(n_rows, 0.0);
  const std::vector<float> far_keys(n_q * hd, 0.0f);  // logits 0 instead of the real ones
  reconstruction_max_attention_ref(wrong.data(), keys.data(), n_rows, q.data(), n_group, n_q,
                                   far_keys.data(), hd);
  double worst = 0.0;
  for (size_t j = 0; j < n_rows; ++j)
    worst = std::max(worst, std::fabs(wrong[j] - ref[j]) / ref[j]);
  EXPECT_GT(worst, 100.0 * rel);
}

TEST(KvzipKernel, RejectsEmptySizes) {
  float out = 0.0f;
  const float x = 0.0f;
  EXPECT_THROW(reconstruction_max_attention(&out, &x, 0, &x, 1, 1, &x, 1), std::invalid_argument);
  EXPECT_THROW(reconstruction_max_attention(&out, &x, 1, &x, 1, 0, &x, 1), std::invalid_argument);
}

CacheConfig kvzip_config(size_t budget) {
  CacheConfig c;
  c.policy = PolicyKind::kvzip;
  c.chunk_mode = ChunkMode::end_of_prompt;
  c.budget = budget;
  c.window = 4;
  c.n_sink = 2;
  c.keep_window = true;
  c.pool = PoolKind::none;  // the tests hold the selection to the raw supplied scores
  c.kernel = 1;
  return c;
}

struct CacheCopy {
  std::vector<std::vector<float>> keys, values;  // [layer * n_kv + h][rows][hd]
  std::vector<std::vector<int64_t>> positions;
  std::vector<size_t> offsets;
};

CacheCopy copy_caches(const LlamaSession& s) {
  CacheCopy c;
  for (const LayerCache& cache : s.caches()) {
    c.offsets.push_back(cache.offset());
    for (size_t h = 0; h < cache.dims().n_kv_heads; ++h) {
      c.keys.emplace_back(cache.size() * cache.dims().head_dim);
      c.values.emplace_back(cache.size() * cache.dims().head_dim);
      cache.read_keys(h, c.keys.back().data());
      cache.read_values(h, c.values.back().data());
      const auto p = cache.positions(h);
      c.positions.emplace_back(p.begin(), p.end());
    }
  }
  return c;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

ReconstructionOptions small_chunks() {
  ReconstructionOptions o;
  o.prompt = {5, 17, 42};  // any ids: the pass does not care what the instruction says
  o.chunk = 9;             // several chunks, with overlap
  o.overlap = 3;
  return o;
}

// The chunk plan keeps every reconstruction position below the model's context_length, covers the
// context in order with the overlap rule, and starts at n_past whenever there is room for it.
void expect_plan_valid(size_t n_context, size_t n_past, size_t n_ctx,
                       const ReconstructionOptions& options) {
  const auto plan = reconstruction_plan(n_context, n_past, n_ctx, options);
  size_t next = 0;
  const size_t room = n_ctx - n_past;
  for (const ReconstructionChunk& c : plan) {
    ASSERT_EQ(c.begin, next);
    ASSERT_GT(c.end, c.begin);
    ASSERT_EQ(c.overlap, std::min(options.overlap, c.begin));
    const size_t tokens = options.prompt.size() + c.overlap + (c.end - c.begin);
    ASSERT_LE(c.first_position + tokens, n_ctx) << "n_past " << n_past << " chunk at " << c.begin;
    ASSERT_LE(c.end - c.begin, options.chunk);
    if (room >= options.prompt.size() + options.overlap + kMinReconstructionChunk) {
      ASSERT_EQ(c.first_position, n_past);  // room: no clamp
    }
    next = c.end;
  }
  ASSERT_EQ(next, n_context);
}

TEST(KvzipPlan, PositionsStayInsideTheContext) {
  ReconstructionOptions options;
  options.prompt.assign(10, 1);
  options.overlap = 8;
  options.chunk = 1024;
  for (const size_t n_past : {1u, 100u, 1000u, 1500u, 1990u, 2000u, 2030u, 2047u, 2048u}) {
    expect_plan_valid(n_past - 1, n_past, 2048, options);
  }
  // Room for whole chunks: the plan is the plain one, at n_past.
  const auto plain = reconstruction_plan(2999, 3000, 1u << 20, options);
  ASSERT_EQ(plain.size(), 3u);
  EXPECT_EQ(plain[1].begin, 1024u);
  EXPECT_EQ(plain[1].first_position, 3000u);
  // 2K context on a 2K model (chunks must not run past context_length): shrunk chunks.
  const auto shrunk = reconstruction_plan(1999, 2000, 2048, options);
  EXPECT_EQ(shrunk.front().end, 32u);                           // room 30 < 32: the minimal chunk
  EXPECT_EQ(shrunk.front().first_position, 2000u);              // 10 + 32 tokens still fit
  EXPECT_EQ(shrunk[1].first_position, 2048u - 10u - 8u - 32u);  // with the overlap: moved back
  const auto fits = reconstruction_plan(1499, 1500, 2048, options);
  EXPECT_EQ(fits.front().end, 2048u - 1500u - 18u);  // the room exactly
  EXPECT_EQ(fits.front().first_position, 1500u);
  options.chunk = 0;
  EXPECT_THROW(reconstruction_plan(10, 10, 2048, options), std::invalid_argument);
  options.chunk = 16;
  EXPECT_THROW(reconstruction_plan(10, 2049, 2048, options), std::invalid_argument);
  EXPECT_THROW(reconstruction_plan(10, 10, 18, options), std::invalid_argument);  // 10 + 8 + 1
  EXPECT_NO_THROW(reconstruction_plan(10, 10, 19, options));
}

TEST(KvzipPass, LeavesTheCacheBitIdenticalAndSelectsFromItsScores) {
  const LlamaModel model = load_model(gguf::TensorType::f32);
  const std::vector<int32_t>& prompt = golden().prompt;
  ASSERT_GT(prompt.size(), 20u);
  const size_t budget = prompt.size() / 2;
  LlamaSession session(model, kvzip_config(budget), SessionOptions{7, small_chunks()});
  session.prefill_shared(prompt);
  const CacheCopy before = copy_caches(session);
  const ReconstructionScores scores = session.reconstruction_scores();
  const CacheCopy after = copy_caches(session);
  EXPECT_TRUE(same_bits(before.keys, after.keys));
  EXPECT_TRUE(same_bits(before.values, after.values));
  EXPECT_EQ(before.positions, after.positions);
  EXPECT_EQ(before.offsets, after.offsets);
  ASSERT_EQ(scores.n_rows, prompt.size());
  ASSERT_EQ(scores.layers.size(), model.config().n_layers);

  const LlamaSession forked = session.fork(kvzip_config(budget));
  const LlamaSession reused = session.fork(kvzip_config(budget), &scores);
  LlamaSession dedicated(model, kvzip_config(budget), SessionOptions{7, small_chunks()});
  dedicated.prefill(prompt);
  const size_t n_kv = model.config().n_kv_heads, hd = model.config().head_dim;
  for (const LlamaSession* s : {&forked, &reused, static_cast<const LlamaSession*>(&dedicated)}) {
    const CacheCopy kept = copy_caches(*s);
    for (size_t l = 0; l < scores.layers.size(); ++l) {
      for (size_t h = 0; h < n_kv; ++h) {
        const size_t i = l * n_kv + h;
        const std::vector<uint32_t> expected =
            select_rows(scores.layers[l].data() + h * scores.n_rows, scores.n_rows, budget, 2, 4);
        ASSERT_EQ(kept.positions[i].size(), expected.size());
        for (size_t r = 0; r < expected.size(); ++r) {
          ASSERT_EQ(kept.positions[i][r], static_cast<int64_t>(expected[r]));
          EXPECT_EQ(0, std::memcmp(kept.keys[i].data() + r * hd,
                                   before.keys[i].data() + expected[r] * hd, hd * sizeof(float)));
          EXPECT_EQ(0, std::memcmp(kept.values[i].data() + r * hd,
                                   before.values[i].data() + expected[r] * hd, hd * sizeof(float)));
        }
      }
    }
  }
  // The dedicated session computed the same scores itself and generates the same tokens.
  ASSERT_NE(dedicated.reconstruction(), nullptr);
  EXPECT_TRUE(same_bits(dedicated.reconstruction()->layers, scores.layers));
  LlamaSession a = session.fork(kvzip_config(budget), &scores);
  std::vector<float> la = a.decode(prompt.back()), lb = dedicated.decode(prompt.back());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
}

TEST(KvzipPass, MisuseIsANamedError) {
  const LlamaModel model = load_model(gguf::TensorType::f32);
  LlamaSession fresh(model, kvzip_config(8), SessionOptions{7, small_chunks()});
  EXPECT_THROW(fresh.reconstruction_scores(), std::invalid_argument);
  ReconstructionOptions bad = small_chunks();
  bad.prompt = {static_cast<int32_t>(model.config().n_vocab)};
  LlamaSession session(model, kvzip_config(8), SessionOptions{7, bad});
  EXPECT_THROW(session.prefill(golden().prompt), std::invalid_argument);
  // Scores of another prompt length do not fit.
  LlamaSession shared(model, kvzip_config(8), SessionOptions{7, small_chunks()});
  shared.prefill_shared(golden().prompt);
  ReconstructionScores wrong = shared.reconstruction_scores();
  wrong.n_rows -= 1;
  EXPECT_THROW(shared.fork(kvzip_config(8), &wrong), std::invalid_argument);
}

// ---- the whole pass against a double-precision forward -----------------------------------------

const float* f32(const WeightMatrix& w) {
  return static_cast<const float*>(w.data);
}

// y [rows] = W [rows][cols] x [cols]
std::vector<double> matvec(const WeightMatrix& w, const std::vector<double>& x) {
  std::vector<double> y(w.rows, 0.0);
  for (size_t r = 0; r < w.rows; ++r) {
    for (size_t c = 0; c < w.cols; ++c) y[r] += static_cast<double>(f32(w)[r * w.cols + c]) * x[c];
  }
  return y;
}

std::vector<double> rmsnorm(const std::vector<double>& x, const float* weight, double eps) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * weight[i];
  return y;
}

void rope(double* v, size_t n_rot, double pos, double base) {
  for (size_t i = 0; i < n_rot / 2; ++i) {
    const double theta =
        pos * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    const double x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * std::cos(theta) - x1 * std::sin(theta);
    v[2 * i + 1] = x0 * std::sin(theta) + x1 * std::cos(theta);
  }
}

// Scores of one reconstruction chunk, in double: tokens at positions p0.., attending to the
// cached rows of `session` (read back as stored) and causally to themselves; out [layer][kv][row]
// accumulates the max probability. Also returns the largest |logit| seen.
double reference_chunk(std::vector<std::vector<double>>& out, const LlamaSession& session,
                       const std::vector<int32_t>& tokens, size_t position_shift = 0) {
  const LlamaModel& model = session.model();
  const LlamaConfig& c = model.config();
  const LlamaWeights& w = model.weights();
  const size_t S = tokens.size(), hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads;
  const size_t group = nh / nkv, p0 = session.n_past() + position_shift;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  double max_logit = 0.0;
  std::vector<std::vector<double>> x(S);
  for (size_t t = 0; t < S; ++t) {
    const float* e = f32(w.token_embd) + static_cast<size_t>(tokens[t]) * c.n_embd;
    x[t].assign(e, e + c.n_embd);
  }
  for (size_t l = 0; l < c.n_layers; ++l) {
    const LlamaLayerWeights& lw = w.layers[l];
    const LayerCache& cache = session.caches()[l];
    const size_t n_rows = cache.size();
    std::vector<std::vector<double>> q(S), k(S), v(S);
    for (size_t t = 0; t < S; ++t) {
      const std::vector<double> xb = rmsnorm(x[t], lw.attn_norm, c.rms_eps);
      q[t] = matvec(lw.wq, xb);
      k[t] = matvec(lw.wk, xb);
      v[t] = matvec(lw.wv, xb);
      for (size_t h = 0; h < nh; ++h)
        rope(q[t].data() + h * hd, c.n_rot, double(p0 + t), c.rope_freq_base);
      for (size_t h = 0; h < nkv; ++h)
        rope(k[t].data() + h * hd, c.n_rot, double(p0 + t), c.rope_freq_base);
    }
    std::vector<std::vector<double>> att(S, std::vector<double>(nh * hd, 0.0));
    for (size_t kv = 0; kv < nkv; ++kv) {
      std::vector<float> ck(n_rows * hd), cv(n_rows * hd);
      cache.read_keys(kv, ck.data());
      cache.read_values(kv, cv.data());
      for (size_t g = 0; g < group; ++g) {
        const size_t head = kv * group + g;
        for (size_t t = 0; t < S; ++t) {
          std::vector<double> logit(n_rows + t + 1);
          double m = -1e300;
          for (size_t j = 0; j < n_rows + t + 1; ++j) {
            double s = 0.0;
            for (size_t d = 0; d < hd; ++d) {
              const double kd =
                  j < n_rows ? static_cast<double>(ck[j * hd + d]) : k[j - n_rows][kv * hd + d];
              s += q[t][head * hd + d] * kd;
            }
            logit[j] = s * scale;
            m = std::max(m, logit[j]);
            max_logit = std::max(max_logit, std::fabs(logit[j]));
          }
          double sum = 0.0;
          for (double& z : logit) sum += (z = std::exp(z - m));
          for (size_t j = 0; j < logit.size(); ++j) {
            const double p = logit[j] / sum;
            if (j < n_rows) out[l][kv * n_rows + j] = std::max(out[l][kv * n_rows + j], p);
            for (size_t d = 0; d < hd; ++d) {
              const double vd =
                  j < n_rows ? static_cast<double>(cv[j * hd + d]) : v[j - n_rows][kv * hd + d];
              att[t][head * hd + d] += p * vd;
            }
          }
        }
      }
    }
    for (size_t t = 0; t < S; ++t) {
      const std::vector<double> o = matvec(lw.wo, att[t]);
      for (size_t i = 0; i < c.n_embd; ++i) x[t][i] += o[i];
      const std::vector<double> xb = rmsnorm(x[t], lw.ffn_norm, c.rms_eps);
      std::vector<double> gate = matvec(lw.w_gate, xb), up = matvec(lw.w_up, xb);
      for (size_t i = 0; i < c.n_ff; ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      const std::vector<double> down = matvec(lw.w_down, gate);
      for (size_t i = 0; i < c.n_embd; ++i) x[t][i] += down[i];
    }
  }
  return max_logit;
}

TEST(KvzipPass, MatchesADoublePrecisionForward) {
  const LlamaModel model = load_model(gguf::TensorType::f32);
  const LlamaConfig& c = model.config();
  const std::vector<int32_t>& prompt = golden().prompt;
  const ReconstructionOptions ro = small_chunks();
  LlamaSession session(model, kvzip_config(prompt.size() / 2), SessionOptions{7, ro});
  session.prefill_shared(prompt);
  const ReconstructionScores got = session.reconstruction_scores();

  const size_t n_rows = prompt.size();
  const std::vector<int32_t> context(prompt.begin() + 1, prompt.end());
  // shift 0: the pass as specified; shift 1: the same tokens one position later (a plausible
  // off-by-one), which the bound below must tell apart.
  auto reference = [&](size_t shift, double* max_logit) {
    std::vector<std::vector<double>> ref(c.n_layers,
                                         std::vector<double>(c.n_kv_heads * n_rows, 0.0));
    for (size_t start = 0; start < context.size(); start += ro.chunk) {
      std::vector<int32_t> tokens = ro.prompt;
      const size_t overlap = std::min(ro.overlap, start);
      const size_t end = std::min(context.size(), start + ro.chunk);
      tokens.insert(tokens.end(), context.begin() + static_cast<std::ptrdiff_t>(start - overlap),
                    context.begin() + static_cast<std::ptrdiff_t>(end));
      *max_logit = std::max(*max_logit, reference_chunk(ref, session, tokens, shift));
    }
    return ref;
  };
  double max_logit = 0.0, unused = 0.0;
  const std::vector<std::vector<double>> ref = reference(0, &max_logit);
  const std::vector<std::vector<double>> shifted = reference(1, &unused);
  // Error budget: the fp32 forward errs relatively by about gamma(accumulation length) per
  // matrix product, compounded over the layers' products (q/k: 2 + 3 per earlier layer); a logit
  // error of delta moves a probability by a factor e^(2 delta); the softmax adds its own terms.
  const size_t acc = c.n_embd + c.n_ff;
  const double delta = static_cast<double>(5 * c.n_layers) * gamma(acc) * (1.0 + max_logit);
  const double rel = 2.0 * delta + 5.0 * kU + gamma(n_rows + ro.prompt.size() + ro.chunk);
  double worst = 0.0;
  for (size_t l = 0; l < c.n_layers; ++l) {
    for (size_t i = 0; i < ref[l].size(); ++i) {
      ASSERT_NEAR(got.layers[l][i], ref[l][i], rel * ref[l][i] + 1e-30)
          << "layer " << l << " kv " << i / n_rows << " row " << i % n_rows;
      worst = std::max(worst, std::fabs(got.layers[l][i] - ref[l][i]) / ref[l][i]);
    }
  }
  std::printf("[kvzip] worst relative error %.3g, bound %.3g\n", worst, rel);
  double worst_shifted = 0.0;
  for (size_t l = 0; l < c.n_layers; ++l) {
    for (size_t i = 0; i < ref[l].size(); ++i) {
      worst_shifted = std::max(worst_shifted, std::fabs(shifted[l][i] - ref[l][i]) / ref[l][i]);
    }
  }
  EXPECT_GT(worst_shifted, 10.0 * rel) << "the bound could not see a one-position shift";
}

}  // namespace
}  // namespace snapkv
