// Task generator: determinism, train/eval disjointness, needle placement at the drawn depth,
// answers present in the context (absent in the no-needle control), and length control.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>

#include "snapkv/eval/scoring.h"
#include "snapkv/eval/tasks.h"

namespace snapkv::eval {
namespace {

const TokenCounter kApprox = [](std::string_view text) { return approx_token_count(text); };

TaskOptions opts(size_t context, uint64_t seed = 3, Split split = Split::eval) {
  TaskOptions o;
  o.context_tokens = context;
  o.seed = seed;
  o.split = split;
  return o;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

// The haystack body: the context after its instruction line, without the final newline.
std::string body_of(const Sample& s) {
  const size_t start = s.context.find('\n') + 1;
  return s.context.substr(start, s.context.size() - 1 - start);
}

TEST(Tasks, NamesRoundTrip) {
  for (Task t : all_tasks()) EXPECT_EQ(parse_task(task_name(t)), t);
  EXPECT_EQ(all_tasks().size(), 6u);
  EXPECT_THROW(parse_task("niah"), std::invalid_argument);
  EXPECT_EQ(parse_split("train"), Split::train);
  EXPECT_THROW(parse_split("test"), std::invalid_argument);
}

TEST(Tasks, DeterministicPerSeedAndIndex) {
  for (Task t : all_tasks()) {
    const Sample a = generate_sample(t, opts(512), 5, kApprox);
    const Sample b = generate_sample(t, opts(512), 5, kApprox);
    EXPECT_EQ(full_prompt(a), full_prompt(b)) << task_name(t);
    EXPECT_EQ(a.answers, b.answers);
    EXPECT_EQ(a.depths, b.depths);
    const Sample other_index = generate_sample(t, opts(512), 6, kApprox);
    const Sample other_seed = generate_sample(t, opts(512, 4), 5, kApprox);
    EXPECT_NE(full_prompt(a), full_prompt(other_index));
    EXPECT_NE(full_prompt(a), full_prompt(other_seed));
  }
  // generate_samples is the same stream as generate_sample.
  const auto batch = generate_samples(Task::passkey, opts(256), 3, kApprox);
  EXPECT_EQ(full_prompt(batch[2]),
            full_prompt(generate_sample(Task::passkey, opts(256), 2, kApprox)));
}

TEST(Tasks, TrainAndEvalStreamsDiffer) {
  std::set<std::string> eval_answers;
  for (size_t i = 0; i < 50; ++i) {
    eval_answers.insert(generate_sample(Task::niah_single, opts(256), i, kApprox).answers[0]);
  }
  size_t shared = 0;
  for (size_t i = 0; i < 50; ++i) {
    const Sample s = generate_sample(Task::niah_single, opts(256, 3, Split::train), i, kApprox);
    shared += eval_answers.count(s.answers[0]);
  }
  EXPECT_EQ(shared, 0u);  // 7-digit values: an accidental match has probability ~ 50*50/9e6
  EXPECT_THROW(generate_sample(Task::niah_single, opts(256, 1ULL << 63), 0, kApprox),
               std::invalid_argument);
}

TEST(Tasks, LengthFitsBudgetAndFillsIt) {
  for (Task t : all_tasks()) {
    for (size_t context : {300u, 1024u, 2048u}) {
      const Sample s = generate_sample(t, opts(context), 1, kApprox);
      const size_t total = approx_token_count(full_prompt(s) + reference_completion(s));
      EXPECT_LE(total, context) << task_name(t);
      // The generator stops only when one more filler sentence would not fit (< ~40 tokens).
      EXPECT_GE(total + 40, context) << task_name(t) << " at " << context;
      EXPECT_EQ(s.prompt_tokens, approx_token_count(full_prompt(s)));
    }
  }
}

TEST(Tasks, UsesTheInjectedCounter) {
  const TokenCounter chars = [](std::string_view text) { return text.size(); };
  const Sample s = generate_sample(Task::niah_single, opts(3000), 0, chars);
  const size_t total = (full_prompt(s) + reference_completion(s)).size();
  EXPECT_LE(total, 3000u);
  EXPECT_GE(total, 3000u - 200u);
  EXPECT_THROW(generate_sample(Task::niah_single, opts(50), 0, chars), std::invalid_argument);
  EXPECT_THROW(generate_sample(Task::niah_single, opts(1024), 0, TokenCounter{}),
               std::invalid_argument);
}

TEST(Tasks, ContextTooSmallThrows) {
  EXPECT_THROW(generate_sample(Task::niah_multiquery, opts(64), 0, kApprox), std::invalid_argument);
}

TEST(Tasks, SingleNeedleSitsAtTheReportedDepth) {
  double sum = 0.0, lo = 1.0, hi = 0.0;
  const size_t n = 200;
  for (size_t i = 0; i < n; ++i) {
    const Sample s = generate_sample(Task::niah_single, opts(512), i, kApprox);
    ASSERT_EQ(s.depths.size(), 1u);
    const std::string body = body_of(s);
    const size_t pos = body.find("One of the special magic numbers for ");
    ASSERT_NE(pos, std::string::npos);
    // Sentences are joined by ". "; the needle is one of them.
    const size_t sentences = count_of(body, ". ") + 1;
    const size_t before = count_of(body.substr(0, pos), ". ");
    const size_t n_filler = sentences - 1;
    EXPECT_DOUBLE_EQ(s.depths[0], double(before) / double(n_filler)) << i;
    sum += s.depths[0];
    lo = std::min(lo, s.depths[0]);
    hi = std::max(hi, s.depths[0]);
  }
  // Uniform depths: mean 0.5 with standard error 0.29/sqrt(200) = 0.02; both ends reached.
  EXPECT_NEAR(sum / double(n), 0.5, 0.08);
  EXPECT_LT(lo, 0.05);
  EXPECT_GT(hi, 0.95);
}

TEST(Tasks, AnswersAppearInContextAndVanishInTheControl) {
  for (Task t : all_tasks()) {
    for (size_t i = 0; i < 20; ++i) {
      TaskOptions o = opts(768);
      const Sample s = generate_sample(t, o, i, kApprox);
      ASSERT_FALSE(s.answers.empty());
      for (const auto& a : s.answers) EXPECT_NE(s.context.find(a), std::string::npos) << a;
      o.remove_needles = true;
      const Sample control = generate_sample(t, o, i, kApprox);
      EXPECT_EQ(control.question, s.question);
      EXPECT_EQ(control.answers, s.answers);
      EXPECT_LT(control.context.size(), s.context.size());
      for (const auto& a : s.answers) {
        EXPECT_EQ(control.context.find(a), std::string::npos) << task_name(t) << " " << a;
      }
      // A prediction that copies the whole haystack finds every answer only with the needles.
      EXPECT_DOUBLE_EQ(string_match_all(s.context, s.answers), 1.0);
      EXPECT_DOUBLE_EQ(string_match_all(control.context, s.answers), 0.0);
    }
  }
}

TEST(Tasks, MultiNeedleStructure) {
  const Sample mk = generate_sample(Task::niah_multikey, opts(1024), 0, kApprox);
  EXPECT_EQ(count_of(mk.context, "One of the special magic numbers for "), 4u);
  EXPECT_EQ(mk.answers.size(), 1u);
  EXPECT_EQ(mk.depths.size(), 4u);

  const Sample mv = generate_sample(Task::niah_multivalue, opts(1024), 0, kApprox);
  EXPECT_EQ(mv.answers.size(), 4u);
  EXPECT_EQ(std::set<std::string>(mv.answers.begin(), mv.answers.end()).size(), 4u);

  const Sample mq = generate_sample(Task::niah_multiquery, opts(1024), 0, kApprox);
  EXPECT_EQ(mq.answers.size(), 4u);
  EXPECT_EQ(count_of(mq.question, ","), 2u);  // "k1, k2, k3 and k4"

  TaskOptions o = opts(1024);
  o.vt_hops = 3;
  const Sample vt = generate_sample(Task::vt, o, 0, kApprox);
  ASSERT_EQ(vt.answers.size(), 4u);
  // The chain appears in order: VAR A = value, VAR B = VAR A, ...
  size_t last = 0;
  for (size_t i = 0; i < vt.answers.size(); ++i) {
    const size_t pos = vt.context.find("VAR " + vt.answers[i] + " =");
    ASSERT_NE(pos, std::string::npos);
    EXPECT_GE(pos, last);
    last = pos;
  }
  EXPECT_TRUE(std::is_sorted(vt.depths.begin(), vt.depths.end()));

  const Sample pk = generate_sample(Task::passkey, opts(1024), 0, kApprox);
  EXPECT_EQ(count_of(pk.context, pk.answers[0]),
            2u);  // "The pass key is K. ... K is the pass key."
  EXPECT_EQ(pk.answers[0].size(), 5u);
}

TEST(Tasks, FillerIsVaried) {
  TaskRng rng(11);
  std::set<std::string> sentences;
  for (int i = 0; i < 500; ++i) sentences.insert(filler_sentence(rng));
  EXPECT_GT(sentences.size(), 495u);  // ~10^12 combinations: repeats are rare
}

TEST(Tasks, RngIsDeterministicAndInRange) {
  TaskRng a(5), b(5);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next(), b.next());
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 7000; ++i) ++counts[a.below(7)];
  // Binomial(7000, 1/7): sd = 29; allow 5 sd.
  for (int c : counts) EXPECT_NEAR(c, 1000, 145);
  for (int i = 0; i < 100; ++i) {
    const uint64_t v = a.digits(7);
    EXPECT_GE(v, 1000000u);
    EXPECT_LT(v, 10000000u);
    const double u = a.uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(Tasks, JsonLineCarriesEveryField) {
  const Sample s = generate_sample(Task::niah_multivalue, opts(400), 2, kApprox);
  const auto j = nlohmann::json::parse(sample_to_json(Task::niah_multivalue, 2, s));
  EXPECT_EQ(j.at("task"), "niah_multivalue");
  EXPECT_EQ(j.at("index"), 2);
  EXPECT_EQ(j.at("context"), s.context);
  EXPECT_EQ(j.at("question"), s.question);
  EXPECT_EQ(j.at("answer_prefix"), s.answer_prefix);
  EXPECT_EQ(j.at("answers").get<std::vector<std::string>>(), s.answers);
  EXPECT_EQ(j.at("depths").get<std::vector<double>>(), s.depths);
  EXPECT_EQ(j.at("prompt_tokens"), s.prompt_tokens);
}

TEST(Tasks, ApproxTokenCount) {
  EXPECT_EQ(approx_token_count(""), 0u);
  EXPECT_EQ(approx_token_count("The pass key is 12345."), 4u + 5u + 1u);
  EXPECT_EQ(approx_token_count("a\nb"), 3u);
  EXPECT_EQ(approx_token_count("abcdefghijklmnopq"), 3u);  // 17 letters: 1 + (17-1)/8
}

}  // namespace
}  // namespace snapkv::eval
