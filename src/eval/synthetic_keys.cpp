// The coverage harness's generator of rotated keys and window queries with planted structure
// (documented component by component in include/snapkv/eval/coverage.h).
//
// Strengths are set in logit units: a component meant to add L to q.k/sqrt(d) gets key and query
// amplitudes whose product is L * sqrt(d), so the attention pattern does not depend on head_dim.
#include <algorithm>
#include <cmath>
#include <string>

#include "snapkv/eval/coverage.h"
#include "snapkv/ops/rope.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv::eval {
namespace {

// Logit-unit strengths of the planted components (see the header, items 1-7).
constexpr double kTopicScale = 0.7;       // topic amplitude per channel, keys and queries
constexpr double kQueryTopicNoise = 0.5;  // query topic = key topic + this much latent noise
constexpr double kMagnitudeSigma = 0.3;   // log-normal per-token magnitude of topic + noise
constexpr double kSlowNoise = 0.3;        // key noise in the slowest quarter of the channels
constexpr double kOutlierValue = 6.0;     // outlier channel value in every key
constexpr double kSinkLogit = 9.0;        // boost of position 0 (position p: kSinkDecay^p of it)
constexpr double kSinkDecay = 0.5;
constexpr double kNeedleLogit = 8.0;   // boost of a needle's first token, query head weight 1
constexpr double kNeedleDecay = 0.7;   // along the needle's span
constexpr double kNeedleEcho = 0.3;    // the window keys' share of the needle direction
constexpr double kLocalLogit = 3.0;    // locality boost at distance 0
constexpr double kHeadWeightLo = 0.4;  // per query head needle weight, uniform in [lo, hi]
constexpr double kHeadWeightHi = 1.4;

// splitmix64 stream with Box-Muller normals: same numbers on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }
  size_t below(size_t n) { return static_cast<size_t>(uniform() * static_cast<double>(n)); }

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

uint64_t mix(uint64_t a, uint64_t b) {
  Rng r(a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull));
  return r.next();
}

// A random unit vector supported on channels [begin, end) minus `excluded`, orthogonal to `other`
// (when given). v: [d]
std::vector<double> unit_vector(Rng& rng, size_t d, size_t begin, size_t end,
                                const std::vector<uint8_t>& excluded,
                                const std::vector<double>* other) {
  std::vector<double> v(d, 0.0);
  for (size_t c = begin; c < end; ++c) v[c] = excluded[c] ? 0.0 : rng.normal();
  if (other != nullptr) {
    double proj = 0.0;
    for (size_t c = 0; c < d; ++c) proj += v[c] * (*other)[c];
    for (size_t c = 0; c < d; ++c) v[c] -= proj * (*other)[c];
  }
  double norm = 0.0;
  for (double x : v) norm += x * x;
  norm = std::sqrt(norm);
  SNAPKV_CHECK(norm > 0.0);
  for (double& x : v) x /= norm;
  return v;
}

// Needle spans: n non-overlapping starts in [lo, hi - span], at least one token apart, increasing.
std::vector<size_t> needle_starts(Rng& rng, size_t n, size_t span, size_t lo, size_t hi) {
  // Draw from the free length, then spread: sorted draws in [0, free] shifted by i * (span + 1).
  const size_t free = (hi - lo) - n * (span + 1);
  std::vector<size_t> draws(n);
  for (size_t& x : draws) x = rng.below(free + 1);
  std::sort(draws.begin(), draws.end());
  std::vector<size_t> starts(n);
  for (size_t i = 0; i < n; ++i) starts[i] = lo + draws[i] + i * (span + 1);
  return starts;
}

// Rotates x [n_vectors][n_tokens][d] in place, token t at position first + t.
void apply_rope(std::vector<float>& x, size_t n_vectors, size_t n_tokens, size_t d, int64_t first,
                double base) {
  std::vector<int64_t> positions(n_tokens);
  for (size_t t = 0; t < n_tokens; ++t) positions[t] = first + static_cast<int64_t>(t);
  const RopeTable table(positions.data(), n_tokens, d, base);
  // RopeTable wants [n_tokens][n_heads][d]: transpose, rotate, transpose back.
  std::vector<float> token_major(x.size());
  for (size_t h = 0; h < n_vectors; ++h) {
    for (size_t t = 0; t < n_tokens; ++t) {
      std::copy_n(x.data() + (h * n_tokens + t) * d, d,
                  token_major.data() + (t * n_vectors + h) * d);
    }
  }
  table.apply(token_major.data(), n_vectors, d);
  for (size_t h = 0; h < n_vectors; ++h) {
    for (size_t t = 0; t < n_tokens; ++t) {
      std::copy_n(token_major.data() + (t * n_vectors + h) * d, d,
                  x.data() + (h * n_tokens + t) * d);
    }
  }
}

}  // namespace

void SyntheticSpec::validate() const {
  auto fail = [](const std::string& what, const std::string& got, const std::string& expected) {
    throw_invalid("coverage", what, got, expected);
  };
  if (n_kv_heads == 0) fail("n_kv_heads must be positive", num(n_kv_heads), ">= 1");
  if (group == 0) fail("group must be positive", num(group), ">= 1");
  if (head_dim < 16 || head_dim % 8 != 0) {
    fail("head_dim must be a multiple of 8, at least 16", num(head_dim), "16, 24, 32, ...");
  }
  if (window == 0) fail("window must be positive", num(window), ">= 1");
  if (needle_span == 0) fail("needle_span must be positive", num(needle_span), ">= 1");
  if (topic_rank == 0) fail("topic_rank must be positive", num(topic_rank), ">= 1");
  if (!(topic_corr >= 1.0)) fail("topic_corr too small", std::to_string(topic_corr), ">= 1 token");
  if (n_outlier % 2 != 0 || n_outlier > head_dim / 8) {
    fail("n_outlier must be even and at most head_dim / 8", num(n_outlier),
         "an even number <= " + num(head_dim / 8));
  }
  if (!(rope_base > 1.0) || !std::isfinite(rope_base)) {
    fail("rope_base out of range", std::to_string(rope_base), "finite and > 1");
  }
  // Sinks, then needles (each span plus a gap), then the window, with room to spare.
  const size_t needed = n_sink_tokens + 1 + n_needles * (needle_span + 1) + window;
  if (length < needed || length < 2 * window) {
    fail("length too short for the planted structure", num(length),
         ">= max(" + num(needed) +
             " (sinks + needles + window + 1), 2 * window = " + num(2 * window) + ")");
  }
}

SyntheticData make_synthetic(const SyntheticSpec& spec) {
  spec.validate();
  const size_t S = spec.length, d = spec.head_dim, w = spec.window, G = spec.group;
  const size_t half = d / 2, slow_begin = d - d / 4;
  SyntheticData out;
  out.spec = spec;
  out.keys.assign(spec.n_kv_heads * S * d, 0.0f);
  out.queries.assign(spec.n_kv_heads * G * w * d, 0.0f);
  out.needles.resize(spec.n_kv_heads);
  const double sqrt_d = std::sqrt(static_cast<double>(d));
  const double rho = std::exp(-1.0 / spec.topic_corr);
  const double innovation = std::sqrt(1.0 - rho * rho);

  for (size_t h = 0; h < spec.n_kv_heads; ++h) {
    Rng rng(mix(mix(spec.seed, S), h));
    // Outlier channels: whole RoPE pairs among the slowest quarter of the channels.
    std::vector<uint8_t> outlier(d, 0);
    std::vector<double> outlier_sign(d, 0.0);
    for (size_t placed = 0; placed < spec.n_outlier / 2;) {
      const size_t pair = (slow_begin / 2) + rng.below(d / 8);
      if (outlier[2 * pair]) continue;
      outlier[2 * pair] = outlier[2 * pair + 1] = 1;
      outlier_sign[2 * pair] = rng.uniform() < 0.5 ? -1.0 : 1.0;
      outlier_sign[2 * pair + 1] = rng.uniform() < 0.5 ? -1.0 : 1.0;
      ++placed;
    }
    const std::vector<uint8_t> none(d, 0);
    const std::vector<double> sink_dir = unit_vector(rng, d, slow_begin, d, outlier, nullptr);
    const std::vector<double> needle_dir = unit_vector(rng, d, slow_begin, d, outlier, &sink_dir);
    const std::vector<double> local_dir = unit_vector(rng, d, 0, half, none, nullptr);
    // Topic map: [middle channels d/2 .. 3d/4)][topic_rank], entries N(0, 1/rank).
    std::vector<double> topic_map((slow_begin - half) * spec.topic_rank);
    for (double& x : topic_map) x = rng.normal() / std::sqrt(static_cast<double>(spec.topic_rank));

    // Needle spans between the sinks and the window.
    const std::vector<size_t> starts =
        needle_starts(rng, spec.n_needles, spec.needle_span, spec.n_sink_tokens + 1, S - w);
    std::vector<double> needle_strength(S, 0.0);
    for (size_t start : starts) {
      for (size_t t = 0; t < spec.needle_span; ++t) {
        needle_strength[start + t] = std::pow(kNeedleDecay, static_cast<double>(t));
      }
      out.needles[h].push_back(static_cast<int64_t>(start));
    }

    // Amplitudes (key side x query side = logit * sqrt(d)).
    const double sink_amp = std::sqrt(kSinkLogit * sqrt_d);
    const double needle_amp = std::sqrt(kNeedleLogit * sqrt_d);
    const double local_amp = std::sqrt(kLocalLogit * sqrt_d);

    std::vector<double> topic(spec.topic_rank);
    for (double& z : topic) z = rng.normal();
    std::vector<std::vector<double>> window_topics;  // [w][topic_rank]
    float* keys = out.keys.data() + h * S * d;       // [S][d]
    for (size_t p = 0; p < S; ++p) {
      if (p > 0) {
        for (double& z : topic) z = rho * z + innovation * rng.normal();
      }
      if (p >= S - w) window_topics.push_back(topic);
      const double magnitude = std::exp(kMagnitudeSigma * rng.normal());
      // ordinary part (topic + noise, times the token's magnitude) and planted part, [d] each
      std::vector<double> ordinary(d), planted(d, 0.0);
      for (size_t c = 0; c < d; ++c) {
        double v = rng.normal() * (c >= slow_begin ? kSlowNoise : 1.0);  // token noise
        if (c >= half && c < slow_begin) {
          double t = 0.0;
          for (size_t r = 0; r < spec.topic_rank; ++r) {
            t += topic_map[(c - half) * spec.topic_rank + r] * topic[r];
          }
          v += kTopicScale * t;
        }
        ordinary[c] = outlier[c] ? 0.0 : v * magnitude;
        if (p < spec.n_sink_tokens) {
          planted[c] += sink_amp * std::pow(kSinkDecay, static_cast<double>(p)) * sink_dir[c];
        }
        planted[c] += needle_amp * needle_strength[p] * needle_dir[c];
        if (p >= S - w) planted[c] += kNeedleEcho * needle_amp * needle_dir[c];
      }
      // A planted direction replaces part of the token's own content: the key keeps the norm an
      // ordinary key of its magnitude has, so the key norm alone does not reveal it.
      double ordinary_sq = 0.0, planted_sq = 0.0;
      for (size_t c = 0; c < d; ++c) {
        ordinary_sq += ordinary[c] * ordinary[c];
        planted_sq += planted[c] * planted[c];
      }
      const double keep =
          planted_sq >= ordinary_sq ? 0.0 : std::sqrt((ordinary_sq - planted_sq) / ordinary_sq);
      float* k = keys + p * d;
      for (size_t c = 0; c < d; ++c) {
        double v = keep * ordinary[c] + planted[c] + local_amp * local_dir[c];
        if (outlier[c]) v = outlier_sign[c] * kOutlierValue * (1.0 + 0.05 * rng.normal());
        k[c] = static_cast<float>(v);
      }
    }

    // Queries of the group's heads at the window positions.
    for (size_t g = 0; g < G; ++g) {
      const double needle_weight = kHeadWeightLo + (kHeadWeightHi - kHeadWeightLo) * rng.uniform();
      const double sink_weight = 0.7 + 0.6 * rng.uniform();
      float* q_head = out.queries.data() + ((h * G + g) * w) * d;  // [w][d]
      for (size_t r = 0; r < w; ++r) {
        std::vector<double> qt = window_topics[r];
        for (double& z : qt) z += kQueryTopicNoise * rng.normal();
        for (size_t c = 0; c < d; ++c) {
          double v = rng.normal();
          if (c >= half && c < slow_begin) {
            double t = 0.0;
            for (size_t k = 0; k < spec.topic_rank; ++k) {
              t += topic_map[(c - half) * spec.topic_rank + k] * qt[k];
            }
            v += kTopicScale * t;
          }
          v += sink_weight * sink_amp * sink_dir[c];
          v += needle_weight * needle_amp * needle_dir[c];
          v += local_amp * local_dir[c];
          q_head[r * d + c] = static_cast<float>(v);
        }
      }
    }
  }
  apply_rope(out.keys, spec.n_kv_heads, S, d, 0, spec.rope_base);
  apply_rope(out.queries, spec.n_kv_heads * G, w, d, static_cast<int64_t>(S - w), spec.rope_base);
  return out;
}

}  // namespace snapkv::eval
