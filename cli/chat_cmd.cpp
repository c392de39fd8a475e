// `snapkv chat`: a multi-turn conversation in one compressed KV cache.
//
//   printf 'Hello\nAnd then?\n' | snapkv chat --model M.gguf --system "Be brief." --budget 256
//
// Reads one user turn per line from stdin (an interactive terminal or a pipe); "/exit" or the end
// of input ends the chat (exit 0; 1 when a command failed). /save FILE writes the conversation as
// a .kvc (model/chat_session.h), /load FILE goes on with a saved one. Each turn is rendered with
// the model's chat template (tokenizer.chat_template: Llama 3, ChatML / Qwen, Mistral [INST]) and
// only the new part is appended to the one session (model/chat_session.h). The reply is streamed to
// stdout followed by a newline; a stats line per turn goes to stderr. With --json, one JSON object
// per turn on stdout (one line each) instead; with --json FILE the text as usual and the turns as
// one array in FILE.
//
// Compression: the first turn is the prompt (compressed to --budget by --method, at its end or per
// chunk as --chunk-mode says). Later turns and replies are appended under the decode-time budget:
// --decode-budget when given, else --budget itself, so the cache never holds more than the budget
// per KV head after a turn; the configured method re-selects the rows (every --decode-interval
// appended tokens) with the newest queries as its window. Method full keeps everything.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache_options.h"
#include "command.h"
#include "generation_options.h"
#include "json_fields.h"
#include "progress.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/kv/file/kvc_file.h"
#include "snapkv/model/chat_session.h"
#include "snapkv/model/chat_template.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/sampler.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/error.h"
#include "snapkv/util/output_file.h"

namespace {

struct ChatCmdOptions {
  std::string model;
  std::string system;
  snapkv::cli::CacheOptions cache;
  snapkv::cli::GenerationOptions gen;
  snapkv::cli::JsonOutput json;
  bool quiet = false;
  snapkv::cli::ProgressFlag progress;
  bool no_chat = false;  // no template: each turn as a plain line of text
};

// Kept rows per KV head over the layers: min, mean, max.
struct KeptRows {
  size_t min = 0, max = 0;
  double mean = 0.0;
};

KeptRows kept_rows(const snapkv::LlamaSession& session) {
  KeptRows k;
  k.min = SIZE_MAX;
  size_t n = 0;
  for (const snapkv::LayerCache& cache : session.caches()) {
    for (size_t h = 0; h < cache.dims().n_kv_heads; ++h) {
      const size_t rows = cache.size(h);
      k.min = std::min(k.min, rows);
      k.max = std::max(k.max, rows);
      k.mean += static_cast<double>(rows);
      ++n;
    }
  }
  if (n == 0) k.min = 0;
  k.mean /= static_cast<double>(std::max<size_t>(n, 1));
  return k;
}

const char* kChatHelp =
    "Commands (a line starting with //: a user turn starting with /):\n"
    "  /help    this list\n"
    "  /clear   start a new conversation (the system message stays)\n"
    "  /stats   tokens seen, kept KV rows per head, KV bytes vs an fp16 cache of every token\n"
    "  /save F  write the conversation (its cache, tokens and messages) to the .kvc file F\n"
    "  /load F  go on with the conversation saved in F (by /save, with the same model)\n"
    "  /exit    end the chat (as does the end of input; /quit too)\n";

// /stats on stderr.
void print_stats(const snapkv::ChatSession& chat, const snapkv::CacheConfig& config) {
  const snapkv::LlamaSession* session = chat.session();
  if (session == nullptr) {
    std::fputs("[chat] stats: no turn yet\n", stderr);
    return;
  }
  const snapkv::CacheStats stats = session->cache_stats();
  const KeptRows kept = kept_rows(*session);
  const double saved = stats.bytes_full_fp16 > 0
                           ? 100.0 * (1.0 - static_cast<double>(stats.bytes_stored) /
                                                static_cast<double>(stats.bytes_full_fp16))
                           : 0.0;
  std::fprintf(stderr,
               "[chat] stats: %zu tokens seen | kept rows/head min %zu mean %.1f max %zu (budget "
               "%zu, decode budget %zu) | KV %zu bytes vs %zu full fp16 (%.1f%% saved)\n",
               session->n_past(), kept.min, kept.mean, kept.max, config.budget,
               config.decode_budget, stats.bytes_stored, stats.bytes_full_fp16, saved);
}

// The argument of "/save FILE": the rest of the line, blanks trimmed.
std::string command_argument(const std::string& line, size_t space) {
  if (space == std::string::npos) return {};
  const size_t begin = line.find_first_not_of(" \t", space);
  if (begin == std::string::npos) return {};
  const size_t end = line.find_last_not_of(" \t");
  return line.substr(begin, end - begin + 1);
}

// /save and /load; false (the message on stderr) when the command failed: the chat goes on.
bool save_or_load(snapkv::ChatSession& chat, const ChatCmdOptions& o, const std::string& name,
                  const std::string& path, size_t& turn_index) {
  try {
    if (path.empty()) {
      snapkv::throw_invalid("chat", name + " needs a file", "nothing", name + " FILE.kvc");
    }
    if (name == "/save") {
      // Never over an input (the model) or the --json file, never a device or FIFO: a .kvc is
      // mapped when read (util/output_file.h Seek::required).
      snapkv::cli::check_output("chat", {path, "/save"}, snapkv::Seek::required,
                                {{o.model, "--model"}, {o.json.path, "--json"}});
      chat.save(path);
      if (!o.quiet) {
        std::fprintf(stderr, "[chat] saved %zu tokens, %zu turns to %s\n", chat.history().size(),
                     chat.turns(), path.c_str());
      }
    } else {
      try {
        chat.load(path);
      } catch (const snapkv::KvcError& e) {
        if (e.kind() != snapkv::KvcErrorKind::wrong_model) throw;
        throw snapkv::KvcError(e.kind(), std::string(e.what()) + "; the model given is " + o.model +
                                             ", the cache file " + path +
                                             " was saved with another model");
      }
      turn_index = chat.turns();
      if (!o.quiet) {
        std::fprintf(stderr, "[chat] loaded %zu tokens, %zu turns from %s\n", chat.history().size(),
                     chat.turns(), path.c_str());
      }
    }
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "snapkv: error: %s\n", e.what());
    return false;
  }
}

int run_chat(ChatCmdOptions& o) {
  using namespace snapkv;
  snapkv::cli::apply_threads("chat", o.cache.threads);
  o.json.open("chat", {{o.model, "--model"}});
  nlohmann::json turns = nlohmann::json::array();  // for --json FILE
  const GenerationConfig generation = o.gen.config();
  snapkv::cli::CacheOptions cache_options = o.cache;
  cache_options.knobs.seed = generation.sampler.seed;
  const Method method = cache_options.single_method();
  (void)cache_options.config_for(method, std::max<size_t>(cache_options.budget, 1));
  const LlamaModel model = snapkv::cli::load_model("chat", o.model, o.progress.enabled(o.quiet));
  const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
  const size_t n_ctx =
      o.gen.context_limit("chat", model.config().n_ctx, model.config().arch_name());
  // A conversation's length is not known in advance: --keep F keeps F x the context it may
  // reach (--ctx-size, or the model's) rows per KV head.
  CacheConfig config = cache_options.config_for(method, n_ctx);
  // Later turns are appended under a decode-time budget: the one given, else the budget itself.
  if (config.decode_budget == 0 && config.policy != PolicyKind::full) {
    config.decode_budget = config.budget;
    try {
      config.validate();
    } catch (const std::invalid_argument&) {
      throw_invalid("chat", "--budget too small to re-select during the chat",
                    "--budget " + std::to_string(config.budget),
                    ">= sinks + decode-interval (+ window with --keep-window) = " +
                        std::to_string(config.n_sink + config.decode_interval +
                                       (keeps_window(config) ? config.window : 0)));
    }
  }
  ChatTemplate chat_template = [&] {
    if (o.no_chat) {
      const Vocab& v = tokenizer.vocab();
      const bool bos =
          v.add_bos && v.bos_id >= 0 && static_cast<size_t>(v.bos_id) < v.tokens.size();
      return ChatTemplate::plain(bos ? tokenizer.token_to_piece(v.bos_id, /*special=*/true) : "");
    }
    try {
      return ChatTemplate::from_gguf(model.file());
    } catch (const RuntimeError& e) {
      throw RuntimeError(std::string(e.what()) +
                         " (pass --no-chat to send each turn as a plain line of text)");
    }
  }();
  if (!o.quiet) {
    std::fprintf(stderr, "[chat] %s: %s template, method %s, budget %zu, decode budget %zu\n",
                 o.model.c_str(), std::string(to_string(chat_template.family())).c_str(),
                 method.name.c_str(), config.budget, config.decode_budget);
  }
  ChatSession chat(
      model, tokenizer, std::move(chat_template), config,
      SessionOptions{o.cache.prefill_chunk, ReconstructionOptions{kvzip_repeat_prompt(tokenizer)}},
      generation.sampler, o.system);

  const bool interactive = ::isatty(STDIN_FILENO) == 1;
  std::string line;
  size_t turn_index = 0;
  bool had_error = false;
  for (;;) {
    if (interactive) {
      std::fputs("> ", stderr);
      std::fflush(stderr);
    }
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines
    if (line.rfind("//", 0) == 0) {
      line.erase(0, 1);  // "//text": the user turn "/text"
    } else if (line[0] == '/') {
      const size_t space = line.find(' ');
      const std::string name = line.substr(0, space);
      if (name == "/exit" || name == "/quit") break;
      if (name == "/help") {
        std::fputs(kChatHelp, stderr);
      } else if (name == "/clear") {
        chat.clear();
        turn_index = 0;
        if (!o.quiet) std::fputs("[chat] new conversation\n", stderr);
      } else if (name == "/stats") {
        print_stats(chat, config);
      } else if (name == "/save" || name == "/load") {
        if (!save_or_load(chat, o, name, command_argument(line, space), turn_index)) {
          had_error = true;
        }
      } else {
        std::fprintf(
            stderr,
            "snapkv: error: [chat] unknown command '%s', expected one of /help, /clear, "
            "/stats, /save, /load, /exit (start a line with // to send one beginning with /)\n",
            name.c_str());
        had_error = true;
      }
      continue;
    }
    const ChatTurn turn = chat.send(line, generation, [&](const GenerationPiece& piece) {
      if (!o.json.to_stdout()) {
        std::fwrite(piece.text.data(), 1, piece.text.size(), stdout);
        std::fflush(stdout);
      }
      return true;
    });
    ++turn_index;
    const LlamaSession& session = *chat.session();
    const CacheStats stats = session.cache_stats();
    const KeptRows kept = kept_rows(session);
    if (o.json.given()) {
      nlohmann::json j;
      j["turn"] = turn_index;
      j["text"] = turn.reply;
      j["tokens"] = turn.generated;
      j["generated_tokens"] = turn.generated.size();
      j["finish_reason"] = to_string(turn.finish);
      j["prompt_tokens"] = turn.fed.size();  // appended for this user turn
      j["canonical"] = turn.canonical;
      j["n_past"] = session.n_past();
      snapkv::cli::add_kv_stats(j, session);
      j["budget"] = config.budget;
      j["decode_budget"] = config.decode_budget;
      // Generated bytes need not be valid UTF-8: invalid sequences are replaced.
      if (o.json.to_stdout()) {
        std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
      }
      turns.push_back(std::move(j));
    }
    if (!o.json.to_stdout()) {
      std::fputc('\n', stdout);
      std::fflush(stdout);
      if (!o.quiet) {
        std::fprintf(stderr,
                     "[chat] turn %zu: +%zu tokens, generated %zu (%s) | %zu tokens seen | kept "
                     "rows/head min %zu mean %.1f max %zu | KV %zu bytes vs %zu full fp16\n",
                     turn_index, turn.fed.size(), turn.generated.size(),
                     std::string(to_string(turn.finish)).c_str(), session.n_past(), kept.min,
                     kept.mean, kept.max, stats.bytes_stored, stats.bytes_full_fp16);
      }
    }
  }
  if (o.json.to_file()) o.json.write(turns, "chat");
  return had_error ? 1 : 0;
}

snapkv::cli::RegisterCommand reg{
    "chat", "Multi-turn chat in one compressed KV cache (the model's chat template)",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto o = std::make_shared<ChatCmdOptions>();
      sub.footer(
          "Example:\n  printf 'Hello\\nAnd then?\\n' | snapkv chat --model M.gguf --budget 256\n"
          "One user turn per line on stdin; /exit or end of input ends the chat; /help lists the\n"
          "commands (/clear, /stats, /save FILE, /load FILE). The model's\n"
          "tokenizer.chat_template must be a Llama 3, ChatML / Qwen or Mistral [INST] template\n"
          "(--no-chat: none, each turn a plain line of text).\n"
          "The cache keeps --budget rows per KV head, or --keep x the context (--ctx-size or the\n"
          "model's): the first turn is compressed to it like run's prompt; later turns and\n"
          "replies are kept under --decode-budget (default: the same), re-selected by --method.");
      sub.add_option("--model,-m", o->model, "GGUF model file with a chat template")->required();
      sub.add_option("--system", o->system, "System message");
      snapkv::cli::add_cache_options(sub, o->cache, snapkv::cli::query_aware_cache_spec());
      snapkv::cli::add_generation_options(sub, o->gen, "Tokens per reply");
      snapkv::cli::add_json_option(
          sub, o->json,
          "one object per turn (reply, tokens, kept rows, KV bytes): a line per turn on stdout, "
          "or an array written to FILE at the end");
      sub.add_flag("--quiet", o->quiet, "No log lines on stderr");
      snapkv::cli::add_progress_flags(sub, o->progress);
      sub.add_flag("--no-chat", o->no_chat,
                   "No chat template: each turn and reply is a plain line of text (base models, "
                   "unrecognised templates)");
      return [o] { return run_chat(*o); };
    }};

}  // namespace
