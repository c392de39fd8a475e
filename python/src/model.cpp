// The model level of the Python module: snapkv.load(path) -> Model (the reference engine over a
// GGUF file with its tokenizer), Model.generate / chat (a list of pieces or a streaming
// generator), tokenize / detokenize, compress -> Doc (save, ask), load_cache.
//
// Promises: generate() runs the same prefill, sampler and stopping rule as `snapkv run` (same
// tokens for the same prompt, cache options and seed); compress() and Doc.ask() are `snapkv
// compress` and `snapkv ask`. The GIL is released during the prefill and every decode step;
// between steps a non-streaming generate checks for signals, so Ctrl-C (KeyboardInterrupt) stops
// it. Text is returned as str with invalid UTF-8 replaced; a streaming generate holds back a
// piece while it could still become a stop string or ends inside a UTF-8 sequence.
// Leaves out: multi-turn sessions that keep one cache across calls (chat() renders and prefills
// the whole conversation each call).
#include <pybind11/stl.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "model_handle.h"
#include "snapkv/model/chat_template.h"
#include "snapkv/model/generation.h"
#include "snapkv/model/kvzip.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/prompt_cache.h"
#include "snapkv/model/sampler.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/error.h"
#include "snapkv/util/parallel.h"
#include "snapkv/util/text.h"
#include "snapkv/util/timer.h"

namespace snapkv::python {
namespace {

constexpr std::string_view kComponent = "python";

// One generation: the prefill, then the library's one decode loop (model/generation.h).
class Generation {
 public:
  Generation(ModelPtr m, std::vector<int32_t> prompt, const CacheConfig& config, GenerationConfig g,
             size_t prefill_chunk)
      : m_(std::move(m)),
        prompt_(std::move(prompt)),
        session_(m_->model, config, session_options(*m_, prefill_chunk)),
        g_(std::move(g)) {
    g_.validate();
  }

  // Runs everything; on_piece as generate() takes it. Called once, without the GIL.
  void run(const PieceCallback& on_piece) {
    Timer t;
    std::vector<float> logits = session_.prefill(prompt_);
    prefill_s_ = t.seconds();
    result_ = generate(session_, std::move(logits), m_->tokenizer, g_, prompt_, on_piece);
  }

  const GenerationResult& result() const { return result_; }

  py::dict stats() const {
    py::dict d = stats_dict(session_.cache_stats());
    d["prompt_tokens"] = prompt_.size();
    d["generated_tokens"] = result_.tokens.size();
    d["prefill_s"] = prefill_s_;
    d["decode_s"] = result_.decode_s;
    d["decode_steps"] = result_.decode_steps;
    d["prefill_tokens_per_s"] = static_cast<double>(prompt_.size()) / std::max(prefill_s_, 1e-9);
    d["decode_tokens_per_s"] =
        result_.decode_steps > 0
            ? static_cast<double>(result_.decode_steps) / std::max(result_.decode_s, 1e-9)
            : 0.0;
    return d;
  }

 private:
  ModelPtr m_;
  std::vector<int32_t> prompt_;
  LlamaSession session_;
  GenerationConfig g_;
  GenerationResult result_;
  double prefill_s_ = 0.0;
};

struct Completion {
  std::string text;
  std::vector<int32_t> tokens;
  std::string finish_reason;
  py::dict stats;
  py::object logprobs;  // None, or per token {'id', 'logprob', 'top': [(id, logprob), ...]}
};

Completion completion_of(const Generation& g) {
  const GenerationResult& r = g.result();
  py::object logprobs = py::none();
  if (!r.details.empty()) {
    py::list l;
    for (const GeneratedToken& t : r.details) {
      py::list top;
      for (const TokenLogprob& a : t.top) top.append(py::make_tuple(a.id, a.logprob));
      py::dict d;
      d["id"] = t.id;
      d["logprob"] = t.logprob;
      d["top"] = top;
      l.append(d);
    }
    logprobs = l;
  }
  return Completion{r.text, r.tokens, std::string(to_string(r.finish)), g.stats(), logprobs};
}

// A streaming generate: a worker thread runs the generation and queues its pieces; iterating
// takes them (waiting without the GIL). Dropping the stream cancels the generation (the loop's
// callback returns false) and joins the worker.
class Stream {
 public:
  explicit Stream(std::shared_ptr<Generation> gen) : gen_(std::move(gen)) {}
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { stop(); }

  py::str next() {
    if (!gen_) throw py::stop_iteration();
    if (!worker_.joinable()) start();
    std::string piece;
    bool finished = false;
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return !pieces_.empty() || finished_; });
      if (!pieces_.empty()) {
        piece = std::move(pieces_.front());
        pieces_.pop_front();
      } else {
        finished = true;
      }
    }
    if (!finished) return text(piece);
    {
      py::gil_scoped_release release;
      worker_.join();
    }
    std::shared_ptr<Generation> gen = std::move(gen_);
    if (error_) std::rethrow_exception(error_);
    result_ = completion_of(*gen);
    throw py::stop_iteration();
  }

  py::object result() const { return result_ ? py::cast(*result_) : py::none(); }

 private:
  void start() {
    worker_ = std::thread([this] {
      try {
        gen_->run([this](const GenerationPiece& p) {
          // A piece may end inside a UTF-8 sequence: held back until it is complete.
          pending_ += p.text;
          const size_t n = utf8_complete(pending_);
          std::lock_guard<std::mutex> lock(mutex_);
          if (n > 0) {
            pieces_.emplace_back(pending_.substr(0, n));
            pending_.erase(0, n);
          }
          cv_.notify_one();
          return !cancel_;
        });
      } catch (...) {
        error_ = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (!pending_.empty()) pieces_.push_back(std::move(pending_));
      finished_ = true;
      cv_.notify_one();
    });
  }

  void stop() {
    if (!worker_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancel_ = true;
    }
    worker_.join();  // the worker never takes the GIL
  }

  std::shared_ptr<Generation> gen_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> pieces_;
  std::string pending_;  // the worker's: text not yet queued
  bool finished_ = false;
  bool cancel_ = false;
  std::exception_ptr error_;
  std::optional<Completion> result_;
};

struct GenerateArgs {
  size_t max_tokens;
  SamplerConfig sampler;
  std::optional<std::vector<std::string>> stop;
  bool ignore_eos;
  int top_logprobs;
  bool stream;
  size_t prefill_chunk;
};

py::object run(ModelPtr m, std::vector<int32_t> prompt, const py::handle& cache,
               const GenerateArgs& a) {
  GenerationConfig g;
  g.max_tokens = a.max_tokens;
  g.sampler = a.sampler;
  g.stop = a.stop.value_or(std::vector<std::string>{});
  g.ignore_eos = a.ignore_eos;
  g.top_logprobs = a.top_logprobs;
  g.validate();
  const CacheConfig config = cache_config(cache, prompt.size(), a.sampler.seed);
  auto gen = std::make_shared<Generation>(m, std::move(prompt), config, g, a.prefill_chunk);
  if (a.stream) return py::cast(std::make_unique<Stream>(gen));
  // Ctrl-C: the loop's callback looks for signals between tokens and cancels on one.
  std::optional<py::error_already_set> interrupted;
  {
    py::gil_scoped_release release;
    gen->run([&](const GenerationPiece&) {
      py::gil_scoped_acquire acquire;
      if (PyErr_CheckSignals() != 0) {
        interrupted.emplace();
        return false;
      }
      return true;
    });
  }
  if (interrupted) throw *interrupted;
  return py::cast(completion_of(*gen));
}

// A compressed document: the session after its prompt, as `snapkv compress` leaves it.
struct Doc {
  ModelPtr m;
  std::shared_ptr<LlamaSession> session;
  std::vector<int32_t> tokens;
  CacheConfig config;
  double prefill_s = 0.0;
  size_t file_bytes = 0;
};

std::string ask(const Doc& d, const std::string& question, size_t max_tokens,
                std::vector<std::string> stop) {
  GenerationConfig g;  // greedy, as `snapkv ask` by default
  g.max_tokens = max_tokens;
  g.stop = std::move(stop);
  g.validate();
  const std::vector<int32_t> q = d.m->tokenizer.encode(question, false);
  if (q.empty()) throw_invalid(kComponent, "empty question", "0 tokens", ">= 1 token");
  const size_t n_ctx = d.m->model.config().n_ctx;
  if (d.tokens.size() + q.size() >= n_ctx) {
    throw_invalid(kComponent, "question does not fit after the document",
                  num(d.tokens.size()) + " + " + num(q.size()) + " tokens",
                  "< llama.context_length = " + num(n_ctx));
  }
  py::gil_scoped_release release;
  LlamaSession s = d.session->clone();
  std::vector<float> logits = s.extend(q);
  return generate(s, std::move(logits), d.m->tokenizer, g).text;
}

// The prompt of chat(): messages [{'role': ..., 'content': ...}] rendered with the model's chat
// template. The render carries the special-token texts (and BOS where the template writes it):
// parsed, nothing added, as `snapkv run --chat` tokenizes it.
std::vector<int32_t> chat_tokens(const ModelHandle& h, const py::handle& messages) {
  const char* expected = "[{'role': 'system'|'user'|'assistant', 'content': str}, ...]";
  if (!py::isinstance<py::list>(messages) && !py::isinstance<py::tuple>(messages)) {
    throw_invalid(kComponent, "chat messages", py::repr(messages).cast<std::string>(), expected);
  }
  std::vector<ChatMessage> msgs;
  for (const py::handle& item : messages) {
    if (!py::isinstance<py::dict>(item)) {
      throw_invalid(kComponent, "chat message", py::repr(item).cast<std::string>(), expected);
    }
    const auto d = py::reinterpret_borrow<py::dict>(item);
    if (!d.contains("role") || !d.contains("content")) {
      throw_invalid(kComponent, "chat message", py::repr(d).cast<std::string>(), expected);
    }
    msgs.push_back({d["role"].cast<std::string>(), d["content"].cast<std::string>()});
  }
  if (msgs.empty()) throw_invalid(kComponent, "messages", "[]", ">= 1 message");
  const ChatTemplate t = ChatTemplate::from_gguf(h.model.file());
  return check_prompt(h, h.tokenizer.encode(t.render(msgs), false, true));
}

// generate() and chat(): one binding with GENERATION_ARGS's keywords, differing only in how the
// first argument becomes the prompt's tokens.
auto generation_entry(std::vector<int32_t> (*tokens_of)(const ModelHandle&, const py::handle&)) {
  return [tokens_of](const std::shared_ptr<ModelHandle>& h, const py::handle& prompt,
                     const py::handle& cache, size_t max_tokens, float temperature, float top_p,
                     size_t top_k, float min_p, float repeat_penalty, size_t repeat_last_n,
                     float presence_penalty, float frequency_penalty, uint64_t seed,
                     std::optional<std::vector<std::string>> stop, bool ignore_eos,
                     const std::optional<std::map<int32_t, float>>& logit_bias, int top_logprobs,
                     bool stream, size_t prefill_chunk) {
    SamplerConfig sc{temperature,
                     top_p,
                     seed,
                     top_k,
                     min_p,
                     repeat_penalty,
                     repeat_last_n,
                     presence_penalty,
                     frequency_penalty};
    if (logit_bias) sc.logit_bias.assign(logit_bias->begin(), logit_bias->end());
    return run(h, tokens_of(*h, prompt), cache,
               {max_tokens, sc, std::move(stop), ignore_eos, top_logprobs, stream, prefill_chunk});
  };
}

}  // namespace

// The keyword arguments of generate() and chat(), with the library's shared defaults
// (model/generation.h, model/sampler.h).
#define GENERATION_ARGS                                                                           \
  py::arg("cache") = py::none(), py::arg("max_tokens") = kDefaultMaxTokens,                       \
  py::arg("temperature") = SamplerConfig{}.temperature, py::arg("top_p") = SamplerConfig{}.top_p, \
  py::arg("top_k") = SamplerConfig{}.top_k, py::arg("min_p") = SamplerConfig{}.min_p,             \
  py::arg("repeat_penalty") = SamplerConfig{}.repeat_penalty,                                     \
  py::arg("repeat_last_n") = SamplerConfig{}.repeat_last_n,                                       \
  py::arg("presence_penalty") = SamplerConfig{}.presence_penalty,                                 \
  py::arg("frequency_penalty") = SamplerConfig{}.frequency_penalty,                               \
  py::arg("seed") = SamplerConfig{}.seed, py::arg("stop") = py::none(),                           \
  py::arg("ignore_eos") = GenerationConfig{}.ignore_eos, py::arg("logit_bias") = py::none(),      \
  py::arg("top_logprobs") = GenerationConfig{}.top_logprobs, py::arg("stream") = false,           \
  py::arg("prefill_chunk") = SessionOptions{}.prefill_chunk

void register_model(py::module_& m) {
  m.def("set_threads", &set_threads, py::arg("threads"),
        "Worker threads of the library (0 = all cores).");

  py::class_<Completion>(m, "Completion",
                         "The result of a generate or chat: text, tokens, finish_reason ('stop':\n"
                         "an end-of-generation token or a stop string, 'length', 'context',\n"
                         "'cancelled'), stats (cache accounting and timings) and logprobs (with\n"
                         "top_logprobs >= 0: per token {'id', 'logprob', 'top': [(id, logprob)]}).")
      .def_property_readonly("text", [](const Completion& c) { return text(c.text); })
      .def_readonly("tokens", &Completion::tokens)
      .def_readonly("finish_reason", &Completion::finish_reason)
      .def_readonly("stats", &Completion::stats)
      .def_readonly("logprobs", &Completion::logprobs)
      .def("__str__", [](const Completion& c) { return text(c.text); })
      .def("__repr__", [](const Completion& c) {
        return "Completion(text=" + py::repr(text(c.text)).cast<std::string>() +
               ", tokens=" + num(c.tokens.size()) + ", finish_reason='" + c.finish_reason + "')";
      });

  py::class_<Stream, std::unique_ptr<Stream>>(
      m, "Stream",
      "A streaming generate: iterate for str pieces; .result (a Completion) once exhausted.\n"
      "Dropping it early cancels the generation and frees its cache.")
      .def(
          "__iter__", [](Stream& s) -> Stream& { return s; }, py::return_value_policy::reference)
      .def("__next__", &Stream::next)
      .def_property_readonly("result", &Stream::result);

  py::class_<ModelHandle, std::shared_ptr<ModelHandle>>(
      m, "Model", "A GGUF model (llama, qwen2, qwen3) with its tokenizer: snapkv.load(path).")
      .def_readonly("path", &ModelHandle::path)
      .def_property_readonly(
          "shape",
          [](const ModelHandle& h) {
            const LlamaConfig& c = h.model.config();
            return py::make_tuple(c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim);
          },
          "(n_layers, n_heads, n_kv_heads, head_dim), as build_caches takes it")
      .def_property_readonly("config",
                             [](const ModelHandle& h) {
                               const LlamaConfig& c = h.model.config();
                               py::dict d;
                               d["name"] = c.name;
                               d["arch"] = std::string(c.arch_name());
                               d["n_layers"] = c.n_layers;
                               d["n_embd"] = c.n_embd;
                               d["n_heads"] = c.n_heads;
                               d["n_kv_heads"] = c.n_kv_heads;
                               d["head_dim"] = c.head_dim;
                               d["n_vocab"] = c.n_vocab;
                               d["n_ctx"] = c.n_ctx;
                               return d;
                             })
      .def(
          "tokenize",
          [](const ModelHandle& h, const std::string& s, bool add_special, bool parse_special) {
            return h.tokenizer.encode(s, add_special, parse_special);
          },
          py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false,
          "Token ids of text (BOS first when the vocabulary adds it and add_special).")
      .def(
          "detokenize",
          [](const ModelHandle& h, const std::vector<int32_t>& ids, bool special) {
            return text(h.tokenizer.decode(ids, special));
          },
          py::arg("ids"), py::arg("special") = false, "The text of token ids.")
      .def("generate", generation_entry(&prompt_tokens), py::arg("prompt"), GENERATION_ARGS,
           "Generates from prompt (a str, tokenized with BOS as `snapkv run` does, or token ids)\n"
           "with caches from cache (a snapkv.builder(...); None: the shared default, snapkv at\n"
           "keep 0.2). Stops at an end-of-generation token (ignore_eos bans them), after "
           "max_tokens,\n"
           "at the first of the stop strings (cut before it) or at the model's context. Sampling:\n"
           "temperature 0 = greedy; logit_bias {token id: bias} added first (-inf bans); top_p,\n"
           "top_k, min_p, repeat/presence/frequency penalties over the last repeat_last_n tokens; "
           "seed also seeds the random policy unless the builder\n"
           "sets one. Returns a Completion, or with stream=True a Stream yielding str pieces.\n"
           "Ctrl-C stops a non-streaming call between tokens (KeyboardInterrupt).")
      .def("chat", generation_entry(&chat_tokens), py::arg("messages"), GENERATION_ARGS,
           "Like generate, for messages [{'role': ..., 'content': ...}] rendered with the model's\n"
           "chat template (tokenizer.chat_template; snapkv.Error when the model has none).")
      .def(
          "compress",
          [](const std::shared_ptr<ModelHandle>& h, const std::string& document,
             const py::handle& cache, size_t prefill_chunk) {
            std::vector<int32_t> tokens = h->tokenizer.encode(document);
            if (tokens.empty())
              throw_invalid(kComponent, "empty document", "0 tokens", ">= 1 token");
            const size_t n_ctx = h->model.config().n_ctx;
            if (tokens.size() >= n_ctx) {
              throw_invalid(kComponent, "document leaves no room for a question",
                            num(tokens.size()) + " tokens",
                            "< llama.context_length = " + num(n_ctx));
            }
            const CacheConfig config = cache.is_none()
                                           ? CacheBuilder(std::string(kDefaultDocumentMethod),
                                                          kDefaultKeep, {}, py::dict())
                                                 .config_for(tokens.size())
                                           : config_from(cache, tokens.size(), "cache");
            Doc d{h, nullptr, std::move(tokens), config};
            {
              py::gil_scoped_release release;
              Timer t;
              d.session = std::make_shared<LlamaSession>(h->model, config,
                                                         session_options(*h, prefill_chunk));
              d.session->prefill(d.tokens);
              d.prefill_s = t.seconds();
            }
            return d;
          },
          py::arg("document"), py::arg("cache") = py::none(),
          py::arg("prefill_chunk") = SessionOptions{}.prefill_chunk,
          "Prefills document once and compresses its cache alone (question-agnostic), as\n"
          "`snapkv compress` does; cache None = kvzip at keep 0.2 (that command's default).\n"
          "Returns a Doc: doc.ask(question), doc.save(path).");

  py::class_<Doc>(m, "Doc",
                  "A document's compressed cache: ask() questions from copies of it, save() it\n"
                  "as a .kvc file (`snapkv ask --cache` reads it).")
      .def(
          "save",
          [](const Doc& d, const std::string& path) {
            py::gil_scoped_release release;
            save_prompt_cache(path, *d.session, d.tokens);
          },
          py::arg("path"), "Writes the .kvc file (atomically).")
      .def("ask", &ask, py::arg("question"), py::arg("max_tokens") = kDefaultMaxTokens,
           py::arg("stop") = std::vector<std::string>{},
           "Greedy answer from a fresh copy of the cache with the question appended (as `snapkv\n"
           "ask`): up to max_tokens tokens, an end-of-generation token or a stop string\n"
           "(stop=['\\n'] for one-line answers).")
      .def_readonly("tokens", &Doc::tokens)
      .def_property_readonly("stats",
                             [](const Doc& d) {
                               py::dict s = stats_dict(d.session->cache_stats());
                               s["prompt_tokens"] = d.tokens.size();
                               s["prefill_s"] = d.prefill_s;
                               s["file_bytes"] = d.file_bytes;
                               return s;
                             })
      .def_property_readonly("config", [](const Doc& d) {
        py::dict out;
        for (const auto& [name, value] : config_record(d.config, false)) {
          out[py::str(std::string(name))] = to_python(value);
        }
        return out;
      });

  m.def(
      "load",
      [](const std::string& path, int threads) {
        set_threads(threads);
        py::gil_scoped_release release;
        return std::make_shared<ModelHandle>(path, LlamaModel::load(path));
      },
      py::arg("path"), py::arg("threads") = 0,
      "Opens a GGUF model (memory-mapped). threads: the library's worker threads (0 = all).");
  m.def(
      "load_cache",
      [](const std::shared_ptr<ModelHandle>& h, const std::string& path, size_t prefill_chunk) {
        Doc d{h, nullptr, {}, {}};
        {
          py::gil_scoped_release release;
          PromptCache pc = load_prompt_cache(h->model, path, session_options(*h, prefill_chunk));
          d.session = std::make_shared<LlamaSession>(std::move(pc.session));
          d.tokens = std::move(pc.tokens);
          d.config = pc.config;
          d.file_bytes = pc.file_bytes;
        }
        return d;
      },
      py::arg("model"), py::arg("path"), py::arg("prefill_chunk") = SessionOptions{}.prefill_chunk,
      "Reads a .kvc file written for this model (by Doc.save or `snapkv compress`); a file for\n"
      "another model raises snapkv.Error.");
}

}  // namespace snapkv::python
