// `snapkv ask`: answer questions about a document compressed once by `snapkv compress`, without
// re-running its prefill. Each question is appended to its own copy of the loaded cache (the file
// and the loaded cache are never modified) and answered through model/generation.h's generate().
//
//   snapkv ask --model M.gguf --cache doc.kvc --question "What is the pass key?"
//   snapkv ask --model M.gguf --cache doc.kvc --questions qs.txt --json
//
// Text output: "Q: ...", "A: ..." per question; --json: answers, time to first token per
// question, load time and bytes read. Sampling, stop strings and --chat are `snapkv run`'s
// (cli/generation_options.h). The file is mapped (kv/file/kvc_file.h read_kvc), not copied;
// its bytes read are logged on stderr.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache_options.h"
#include "command.h"
#include "generation_options.h"
#include "json_fields.h"
#include "progress.h"
#include "snapkv/kv/core/spec_json.h"
#include "snapkv/model/chat_template.h"
#include "snapkv/model/generation.h"
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
  snapkv::cli::GenerationOptions gen;
  size_t chunk = 512;
  int threads = 0;
  bool quiet = false;
  snapkv::cli::ProgressFlag progress;
  bool chat = false;   // render each question as a user message with the model's chat template
  std::string system;  // --system (with --chat)
  snapkv::cli::JsonOutput json;
};

// One question per non-empty line of `path` ("-": standard input).
std::vector<std::string> read_questions(const std::string& path) {
  const std::string text = snapkv::cli::read_text_file("ask", path, size_t{16} << 20);
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
    start = end + 1;
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
  if (!o.system.empty() && !o.chat) {
    throw_invalid("ask", "--system without --chat", "--system", "--chat --system TEXT");
  }
  const GenerationConfig base_generation = o.gen.config();
  snapkv::cli::apply_threads("ask", o.threads);
  o.json.open("ask",
              {{o.model, "--model"}, {o.cache, "--cache"}, {o.questions_file, "--questions"}});
  const std::vector<std::string> questions = o.questions_file.empty()
                                                 ? std::vector<std::string>{o.question}
                                                 : read_questions(o.questions_file);
  const LlamaModel model = snapkv::cli::load_model("ask", o.model, o.progress.enabled(o.quiet));
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  std::optional<ChatTemplate> chat_template;
  if (o.chat) {
    try {
      chat_template = ChatTemplate::from_gguf(model.file());
    } catch (const RuntimeError& e) {
      throw RuntimeError(std::string(e.what()) + " (drop --chat to append questions as raw text)");
    }
  }
  Timer load_timer;
  const PromptCache loaded = [&] {
    try {
      return load_prompt_cache(model, o.cache, SessionOptions{o.chunk});
    } catch (const KvcError& e) {
      if (e.kind() != KvcErrorKind::wrong_model) throw;
      // Name both sides: the model given (general.name and file) and the cache file; the
      // fingerprints are in the message.
      const std::string name =
          model.config().name.empty() ? "(no general.name)" : "'" + model.config().name + "'";
      throw KvcError(e.kind(), std::string(e.what()) + "; the model given is " + name + " (" +
                                   o.model + "), the cache file " + o.cache +
                                   " was written with another model (rebuild it with `snapkv "
                                   "compress --model " +
                                   o.model + "`)");
    }
  }();
  const double load_s = load_timer.seconds();
  if (!o.quiet) {
    std::fprintf(stderr,
                 "[ask] %s: %zu bytes read (mapped), %zu document tokens, loaded in %.3f s\n",
                 o.cache.c_str(), loaded.file_bytes, loaded.tokens.size(), load_s);
  }
  const size_t n_ctx = o.gen.context_limit("ask", model.config().n_ctx, model.config().arch_name());

  nlohmann::json answers = nlohmann::json::array();
  for (const std::string& q : questions) {
    std::vector<int32_t> q_tokens;
    if (chat_template) {
      // The question as one user message after the document, rendered with the generation
      // prompt; a BOS the template writes is dropped (the document already starts the sequence).
      std::vector<ChatMessage> messages;
      if (!o.system.empty()) messages.push_back({"system", o.system});
      messages.push_back({"user", q});
      q_tokens = tokenizer.encode(chat_template->render(messages), /*add_special=*/false,
                                  /*parse_special=*/true);
      const int32_t bos = tokenizer.vocab().bos_id;
      if (!q_tokens.empty() && q_tokens.front() == bos) q_tokens.erase(q_tokens.begin());
    } else {
      q_tokens = tokenizer.encode(q, false);
    }
    if (q_tokens.empty()) throw_invalid("ask", "empty question", "0 tokens", ">= 1 token");
    // A re-indexed cache (compressed past the model's context) counts positions, not tokens.
    const bool fits =
        loaded.session.next_position() + q_tokens.size() < n_ctx ||
        (n_ctx == model.config().n_ctx && loaded.session.position_for(q_tokens.size() + 1));
    if (!fits) {
      throw_invalid("ask", "question does not fit after the document",
                    std::to_string(loaded.tokens.size()) + " + " + std::to_string(q_tokens.size()) +
                        " tokens",
                    "< context " + std::to_string(n_ctx));
    }
    Timer ttft_timer;
    LlamaSession session = loaded.session.clone();
    std::vector<float> logits = session.extend(q_tokens);
    const double ttft_s = ttft_timer.seconds();
    std::vector<int32_t> history = loaded.tokens;
    history.insert(history.end(), q_tokens.begin(), q_tokens.end());
    if (!o.json.to_stdout()) std::printf("Q: %s\nA: ", q.c_str());
    const GenerationResult answer =
        generate(session, std::move(logits), tokenizer, base_generation, history,
                 [&](const GenerationPiece& piece) {
                   if (!o.json.to_stdout()) {
                     std::fwrite(piece.text.data(), 1, piece.text.size(), stdout);
                     std::fflush(stdout);
                   }
                   return true;
                 });
    if (o.json.given()) {
      answers.push_back({{"question", q},
                         {"text", answer.text},
                         {"tokens", answer.tokens},
                         {"question_tokens", q_tokens.size()},
                         {"generated_tokens", answer.tokens.size()},
                         {"finish_reason", to_string(answer.finish)},
                         {"ttft_s", ttft_s},
                         {"decode_s", answer.decode_s},
                         {"decode_steps", answer.decode_steps},
                         {"decode_tokens_per_s", answer.decode_steps > 0
                                                     ? static_cast<double>(answer.decode_steps) /
                                                           std::max(answer.decode_s, 1e-9)
                                                     : 0.0}});
    }
    if (!o.json.to_stdout()) {
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (o.json.given()) {
    nlohmann::json j;
    j["cache_file"] = o.cache;
    j["bytes_read"] = loaded.file_bytes;
    j["load_s"] = load_s;
    j["prompt_tokens"] = loaded.tokens.size();
    j["policy"] = to_string(loaded.config.policy);
    j["codec"] = to_string(loaded.config.codec);
    j["budget"] = loaded.config.budget;
    snapkv::cli::add_kv_stats(j, loaded.session);  // the loaded cache, every layer
    // What one decode step reads of the weights: every matrix and the output head, one row of
    // the token embedding (a memory-traffic bound divides this plus the kept KV by a bandwidth).
    const LlamaWeights& w = model.weights();
    j["weight_bytes"] = model.weight_bytes();
    j["weight_bytes_per_step"] = model.weight_bytes() -
                                 (w.tied_output ? 0 : w.token_embd.total_bytes()) +
                                 w.token_embd.row_bytes();
    j["threads"] = snapkv::num_threads();
    j["config"] = snapkv::cli::config_json(config_record_json(loaded.config),
                                           snapkv::cli::to_json(base_generation));
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
          "answered like `snapkv run` (same sampling options; stops at an end-of-generation\n"
          "token, a --stop string or --max-tokens; add --stop '\\n' for one-line answers). A\n"
          "cache written for another model is refused.");
      sub.add_option("--model,-m", o->model, "GGUF model file (the one the cache was made with)")
          ->required();
      sub.add_option("--cache", o->cache, ".kvc file from `snapkv compress`")->required();
      sub.add_option("--question", o->question, "One question");
      sub.add_option("--questions", o->questions_file,
                     "File with one question per line (- = standard input)");
      snapkv::cli::add_generation_options(sub, o->gen, "Tokens per answer");
      sub.add_option("--prefill-chunk", o->chunk, "Tokens per forward of the question")
          ->capture_default_str();
      sub.add_option("--threads,-t", o->threads,
                     "Worker threads and OpenBLAS threads (0 = all cores)")
          ->capture_default_str();
      snapkv::cli::add_json_option(sub, o->json,
                                   "answers, time to first token per question, bytes read");
      sub.add_flag("--quiet", o->quiet, "No log lines on stderr");
      snapkv::cli::add_progress_flags(sub, o->progress);
      sub.add_flag("--chat", o->chat,
                   "Render each question as a user message with the model's chat template "
                   "(after the document)");
      sub.add_option("--system", o->system, "System message (with --chat)");
      return [o] { return run_ask(*o); };
    }};

}  // namespace
