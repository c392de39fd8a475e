// `snapkv ask`: answer questions about a document compressed once by `snapkv compress`, without
// re-running its prefill. Each question is appended to its own copy of the loaded cache (the file
// and the loaded cache are never modified) and answered greedily.
//
//   snapkv ask --model M.gguf --cache doc.kvc --question "What is the pass key?"
//   snapkv ask --model M.gguf --cache doc.kvc --questions qs.txt --json
//
// Text output: "Q: ...", "A: ..." per question; --json: answers, time to first token per
// question, load time and bytes read. The file is mapped (kv/file/kvc_file.h read_kvc), not copied;
// its bytes read are logged on stderr.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cache_options.h"
#include "command.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/prompt_cache.h"
#include "snapkv/model/sampler.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/timer.h"

namespace {

struct AskOptions {
  std::string model;
  std::string cache;
  std::string question;
  std::string questions_file;
  size_t max_tokens = 32;
  bool multiline = false;
  bool ignore_eos = false;
  size_t chunk = 512;
  int threads = 0;
  snapkv::cli::JsonOutput json;
};

constexpr size_t kMaxQuestionsBytes = size_t{16} << 20;

// One question per non-empty line (a file, a FIFO or - for standard input).
std::vector<std::string> read_questions(const std::string& path) {
  std::istringstream in(snapkv::cli::read_text_file("ask", path, kMaxQuestionsBytes));
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  if (out.empty()) snapkv::throw_runtime("ask", "no questions in file", path, ">= 1 line");
  return out;
}

int run_ask(AskOptions& o) {
  using namespace snapkv;
  if (o.question.empty() == o.questions_file.empty()) {
    throw_invalid("ask", "question source", o.question.empty() ? "none" : "both",
                  "exactly one of --question or --questions");
  }
  if (o.max_tokens == 0) throw_invalid("ask", "--max-tokens", "0", ">= 1");
  snapkv::cli::apply_threads("ask", o.threads);
  o.json.open("ask",
              {{o.model, "--model"}, {o.cache, "--cache"}, {o.questions_file, "--questions"}});
  const std::vector<std::string> questions = o.questions_file.empty()
                                                 ? std::vector<std::string>{o.question}
                                                 : read_questions(o.questions_file);
  const LlamaModel model = LlamaModel::load(o.model);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  Timer load_timer;
  const PromptCache loaded = load_prompt_cache(model, o.cache, SessionOptions{o.chunk});
  const double load_s = load_timer.seconds();
  std::fprintf(stderr, "[ask] %s: %zu bytes read (mapped), %zu document tokens, loaded in %.3f s\n",
               o.cache.c_str(), loaded.file_bytes, loaded.tokens.size(), load_s);
  const size_t n_ctx = model.config().n_ctx;

  nlohmann::json answers = nlohmann::json::array();
  for (const std::string& q : questions) {
    const std::vector<int32_t> q_tokens = tokenizer.encode(q, false);
    if (q_tokens.empty()) throw_invalid("ask", "empty question", "0 tokens", ">= 1 token");
    if (loaded.tokens.size() + q_tokens.size() >= n_ctx) {
      throw_invalid("ask", "question does not fit after the document",
                    std::to_string(loaded.tokens.size()) + " + " + std::to_string(q_tokens.size()) +
                        " tokens",
                    "< llama.context_length = " + std::to_string(n_ctx));
    }
    Timer ttft_timer;
    LlamaSession session = loaded.session.clone();
    std::vector<float> logits = session.extend(q_tokens);
    const int32_t first = argmax(logits);
    const double ttft_s = ttft_timer.seconds();
    (void)first;  // answer_greedy takes the same arg-max again
    Timer decode_timer;
    const GreedyAnswer answer = answer_greedy(session, std::move(logits), tokenizer, o.max_tokens,
                                              !o.multiline, o.ignore_eos);
    const double decode_s = decode_timer.seconds();
    if (o.json.given()) {
      answers.push_back(
          {{"question", q},
           {"answer", answer.text},
           {"tokens", answer.tokens},
           {"question_tokens", q_tokens.size()},
           {"ttft_s", ttft_s},
           {"decode_s", decode_s},
           {"decode_steps", answer.decode_steps},
           {"decode_tok_s",
            answer.decode_steps > 0 ? static_cast<double>(answer.decode_steps) / decode_s : 0.0}});
    }
    if (!o.json.to_stdout()) {
      std::printf("Q: %s\nA: %s\n", q.c_str(), answer.text.c_str());
      std::fflush(stdout);
    }
  }
  if (o.json.given()) {
    nlohmann::json j;
    j["cache"] = o.cache;
    j["bytes_read"] = loaded.file_bytes;
    j["load_s"] = load_s;
    j["prompt_tokens"] = loaded.tokens.size();
    j["policy"] = to_string(loaded.config.policy);
    j["codec"] = to_string(loaded.config.codec);
    j["budget"] = loaded.config.budget;
    const CacheStats stats = loaded.session.cache_stats();
    j["kept_rows"] = stats.tokens_kept;
    j["kv_bytes"] = stats.bytes_stored;  // the loaded cache, every layer
    // What one decode step reads of the weights: every matrix and the output head, one row of
    // the token embedding (a memory-traffic bound divides this plus the kept KV by a bandwidth).
    const LlamaWeights& w = model.weights();
    j["weight_bytes"] = model.weight_bytes();
    j["weight_bytes_per_step"] = model.weight_bytes() -
                                 (w.tied_output ? 0 : w.token_embd.total_bytes()) +
                                 w.token_embd.row_bytes();
    j["threads"] = snapkv::num_threads();
    j["answers"] = answers;
    o.json.write(j, "ask");  // invalid UTF-8 in answers is replaced when writing
  }
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "ask", "Answer questions about a document from its compressed cache (.kvc)",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto o = std::make_shared<AskOptions>();
      sub.footer(
          "Example:\n  snapkv compress --model M.gguf --prompt-file doc.txt --out doc.kvc\n"
          "  snapkv ask --model M.gguf --cache doc.kvc --question \"What is the pass key?\"\n"
          "Each question is appended to a fresh copy of the loaded cache (never evicted) and\n"
          "answered greedily up to --max-tokens or a newline. A cache written for another model\n"
          "is refused.");
      sub.add_option("--model,-m", o->model, "GGUF model file (the one the cache was made with)")
          ->required();
      sub.add_option("--cache", o->cache, ".kvc file from `snapkv compress`")->required();
      sub.add_option("--question", o->question, "One question");
      sub.add_option("--questions", o->questions_file, "File with one question per line");
      snapkv::cli::bounded(sub.add_option("--max-tokens,-n,--n-predict", o->max_tokens,
                                          "Tokens per answer (stops at EOS)"),
                           1, snapkv::cli::kMaxContextTokens,
                           "tokens; generation also stops at the model's context")
          ->capture_default_str();
      sub.add_flag("--multiline", o->multiline, "Do not stop an answer at its first newline");
      sub.add_flag("--ignore-eos", o->ignore_eos,
                   "Do not stop an answer at EOS (fixed-length decode, for benchmarks)");
      sub.add_option("--prefill-chunk", o->chunk, "Tokens per forward of the question")
          ->capture_default_str();
      sub.add_option("--threads,-t", o->threads,
                     "Worker threads and OpenBLAS threads (0 = all cores)")
          ->capture_default_str();
      snapkv::cli::add_json_option(sub, o->json,
                                   "answers, time to first token per question, bytes read");
      return [o] { return run_ask(*o); };
    }};

}  // namespace
