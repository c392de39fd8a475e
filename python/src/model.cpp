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
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "snapkv/model/chat_template.h"
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

struct ModelHandle {
  std::string path;
  LlamaModel model;
  Tokenizer tokenizer;
  ModelHandle(std::string p, LlamaModel m)
      : path(std::move(p)), model(std::move(m)), tokenizer(Tokenizer::from_gguf(model.file())) {}
};
using ModelPtr = std::shared_ptr<const ModelHandle>;

py::str text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// Bytes of s that end on a complete UTF-8 sequence (a trailing partial sequence held back).
size_t utf8_complete(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

void set_threads(int threads) {
  const int max =
      std::min(256, 4 * std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  if (threads < 0 || threads > max) {
    throw_invalid(kComponent, "threads out of range", std::to_string(threads),
                  "0 (all cores) .. " + std::to_string(max));
  }
  set_num_threads(threads);
  set_blas_threads(1);  // one pool: ours (ops/gemm.h)
}

SessionOptions session_options(const ModelHandle& m, size_t prefill_chunk) {
  if (prefill_chunk == 0) throw_invalid(kComponent, "prefill_chunk", "0", ">= 1 tokens");
  return SessionOptions{prefill_chunk, ReconstructionOptions{kvzip_repeat_prompt(m.tokenizer)}};
}

std::vector<int32_t> check_prompt(const ModelHandle& m, std::vector<int32_t> tokens);

std::vector<int32_t> prompt_tokens(const ModelHandle& m, const py::handle& prompt) {
  std::vector<int32_t> tokens;
  if (py::isinstance<py::str>(prompt)) {
    const std::string t = prompt.cast<std::string>();
    if (t.empty()) throw_invalid(kComponent, "empty prompt", "''", "a non-empty str");
    tokens = m.tokenizer.encode(t);
  } else {
    try {
      tokens = prompt.cast<std::vector<int32_t>>();
    } catch (const py::cast_error&) {
      throw_invalid(kComponent, "prompt",
                    py::str(py::type::of(prompt).attr("__name__")).cast<std::string>(),
                    "a str or a list of token ids");
    }
    for (int32_t t : tokens) {
      if (t < 0 || static_cast<size_t>(t) >= m.tokenizer.n_vocab()) {
        throw_invalid(kComponent, "prompt token id", std::to_string(t),
                      "in [0, " + num(m.tokenizer.n_vocab()) + ")");
      }
    }
  }
  return check_prompt(m, std::move(tokens));
}

std::vector<int32_t> check_prompt(const ModelHandle& m, std::vector<int32_t> tokens) {
  if (tokens.empty()) throw_invalid(kComponent, "empty prompt", "0 tokens", ">= 1 token");
  const LlamaConfig& mc = m.model.config();
  if (tokens.size() > mc.n_ctx) {
    throw_invalid(kComponent, "prompt longer than the model's context",
                  num(tokens.size()) + " tokens",
                  "<= " + std::string(mc.arch_name()) + ".context_length = " + num(mc.n_ctx));
  }
  return tokens;
}

CacheConfig cache_config(const py::handle& cache, size_t tokens, uint64_t seed) {
  if (cache.is_none()) return CacheBuilder("snapkv", {}, {}, py::dict()).config_for(tokens);
  CacheConfig c = config_from(cache, tokens, "cache");
  // The sampler's seed seeds the random policy too (as `snapkv run --seed`), unless the builder
  // names its own.
  if (py::isinstance<CacheBuilder>(cache) && !cache.cast<const CacheBuilder&>().gave("seed")) {
    c.seed = seed;
  }
  return c;
}

// One generation: the `snapkv run` loop, one token per step().
class Generator {
 public:
  Generator(ModelPtr m, std::vector<int32_t> prompt, const CacheConfig& config,
            const SamplerConfig& sampler, size_t max_tokens, std::vector<std::string> stop,
            size_t prefill_chunk)
      : m_(std::move(m)),
        prompt_(std::move(prompt)),
        session_(m_->model, config, session_options(*m_, prefill_chunk)),
        sampler_(sampler),
        max_tokens_(max_tokens),
        stop_(std::move(stop)) {
    for (const std::string& s : stop_) {
      if (s.empty()) throw_invalid(kComponent, "stop", "''", "non-empty strings");
    }
  }

  // The prefill (GIL released by the caller).
  void start() {
    Timer t;
    logits_ = session_.prefill(prompt_);
    prefill_s_ = t.seconds();
    started_ = true;
    if (max_tokens_ == 0) finish("length");
  }

  // One token; false once finished.
  bool step() {
    if (!started_) start();
    if (done_) return false;
    Timer t;
    const int32_t token = sampler_.sample(logits_);
    if (m_->tokenizer.is_eog(token)) {
      finish("eog");
    } else {
      generated_.push_back(token);
      text_ += m_->tokenizer.token_to_piece(token);
      if (!cut_at_stop()) {
        if (generated_.size() == max_tokens_) {
          finish("length");
        } else if (session_.n_past() >= m_->model.config().n_ctx) {
          finish("context");
        } else {
          logits_ = session_.decode(token);
          ++decode_steps_;
        }
      }
    }
    decode_s_ += t.seconds();
    return !done_;
  }

  // Text not yet handed out that can be handed out now.
  std::string take_ready() {
    size_t end = text_.size();
    if (!done_) {
      end = std::min(end, text_.size() - held_for_stop());
      end = std::min(end, utf8_complete(text_.substr(0, end)));
    }
    std::string out = end > emitted_ ? text_.substr(emitted_, end - emitted_) : std::string();
    emitted_ = std::max(emitted_, end);
    return out;
  }

  bool done() const { return done_; }
  const std::string& text_so_far() const { return text_; }
  const std::vector<int32_t>& tokens() const { return generated_; }
  const std::string& stop_reason() const { return stop_reason_; }

  py::dict stats() const {
    py::dict d = stats_dict(session_.cache_stats());
    d["prompt_tokens"] = prompt_.size();
    d["generated_tokens"] = generated_.size();
    d["prefill_s"] = prefill_s_;
    d["decode_s"] = decode_s_;
    d["decode_steps"] = decode_steps_;
    d["prefill_tokens_per_s"] = static_cast<double>(prompt_.size()) / std::max(prefill_s_, 1e-9);
    d["decode_tokens_per_s"] =
        decode_steps_ > 0 ? static_cast<double>(decode_steps_) / std::max(decode_s_, 1e-9) : 0.0;
    return d;
  }

 private:
  void finish(const char* reason) {
    done_ = true;
    stop_reason_ = reason;
  }

  // Cuts the text at the first stop string; true when one was found.
  bool cut_at_stop() {
    size_t at = std::string::npos;
    for (const std::string& s : stop_) at = std::min(at, text_.find(s));
    if (at == std::string::npos) return false;
    text_.resize(at);
    finish("stop");
    return true;
  }

  // The longest tail of the text that is a proper prefix of a stop string.
  size_t held_for_stop() const {
    size_t held = 0;
    for (const std::string& s : stop_) {
      for (size_t n = std::min(s.size() - 1, text_.size()); n > held; --n) {
        if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
          held = n;
          break;
        }
      }
    }
    return held;
  }

  ModelPtr m_;
  std::vector<int32_t> prompt_;
  LlamaSession session_;
  Sampler sampler_;
  size_t max_tokens_;
  std::vector<std::string> stop_;
  std::vector<float> logits_;
  std::vector<int32_t> generated_;
  std::string text_;
  size_t emitted_ = 0;
  bool started_ = false;
  bool done_ = false;
  std::string stop_reason_;
  double prefill_s_ = 0.0;
  double decode_s_ = 0.0;
  size_t decode_steps_ = 0;
};

struct Completion {
  std::string text;
  std::vector<int32_t> tokens;
  std::string stop_reason;
  py::dict stats;
};

Completion completion_of(const Generator& g) {
  return Completion{g.text_so_far(), g.tokens(), g.stop_reason(), g.stats()};
}

// A streaming generate: iterating yields str pieces; .result once exhausted.
struct Stream {
  std::shared_ptr<Generator> gen;
  std::optional<Completion> result;

  py::str next() {
    if (!gen) throw py::stop_iteration();
    for (;;) {
      bool more = false;
      {
        py::gil_scoped_release release;
        more = gen->step();
      }
      std::string piece = gen->take_ready();
      if (!more) {
        piece += gen->take_ready();
        result = completion_of(*gen);
        gen.reset();  // frees the session now
        if (piece.empty()) throw py::stop_iteration();
        return text(piece);
      }
      if (!piece.empty()) return text(piece);
    }
  }
};

py::object run(ModelPtr m, std::vector<int32_t> prompt, const py::handle& cache, size_t max_tokens,
               float temperature, float top_p, uint64_t seed,
               std::optional<std::vector<std::string>> stop, bool stream, size_t prefill_chunk) {
  SamplerConfig sc{temperature, top_p, seed};
  sc.validate();
  const CacheConfig config = cache_config(cache, prompt.size(), seed);
  auto gen = std::make_shared<Generator>(m, std::move(prompt), config, sc, max_tokens,
                                         stop.value_or(std::vector<std::string>{}), prefill_chunk);
  if (stream) return py::cast(Stream{gen, {}});
  {
    py::gil_scoped_release release;
    gen->start();
  }
  for (;;) {
    bool more = false;
    {
      py::gil_scoped_release release;
      more = gen->step();
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // Ctrl-C
    if (!more) break;
  }
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

std::string ask(const Doc& d, const std::string& question, size_t max_tokens, bool multiline) {
  if (max_tokens == 0) throw_invalid(kComponent, "max_tokens", "0", ">= 1");
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
  return answer_greedy(s, std::move(logits), d.m->tokenizer, max_tokens, !multiline).text;
}

}  // namespace

void register_model(py::module_& m) {
  m.def("set_threads", &set_threads, py::arg("threads"),
        "Worker threads of the library (0 = all cores).");

  py::class_<Completion>(m, "Completion",
                         "The result of a generate or chat: text, tokens, stop_reason ('eog',\n"
                         "'length', 'stop', 'context') and stats (cache accounting and timings).")
      .def_property_readonly("text", [](const Completion& c) { return text(c.text); })
      .def_readonly("tokens", &Completion::tokens)
      .def_readonly("stop_reason", &Completion::stop_reason)
      .def_readonly("stats", &Completion::stats)
      .def("__str__", [](const Completion& c) { return text(c.text); })
      .def("__repr__", [](const Completion& c) {
        return "Completion(text=" + py::repr(text(c.text)).cast<std::string>() +
               ", tokens=" + num(c.tokens.size()) + ", stop_reason='" + c.stop_reason + "')";
      });

  py::class_<Stream>(m, "Stream",
                     "A streaming generate: iterate for str pieces; .result (a Completion) once\n"
                     "exhausted. Dropping it early frees its cache.")
      .def("__iter__", [](Stream& s) -> Stream& { return s; })
      .def("__next__", &Stream::next)
      .def_property_readonly("result", [](const Stream& s) -> py::object {
        return s.result ? py::cast(*s.result) : py::none();
      });

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
      .def(
          "generate",
          [](const std::shared_ptr<ModelHandle>& h, const py::handle& prompt,
             const py::handle& cache, size_t max_tokens, float temperature, float top_p,
             uint64_t seed, std::optional<std::vector<std::string>> stop, bool stream,
             size_t prefill_chunk) {
            return run(h, prompt_tokens(*h, prompt), cache, max_tokens, temperature, top_p, seed,
                       std::move(stop), stream, prefill_chunk);
          },
          py::arg("prompt"), py::arg("cache") = py::none(), py::arg("max_tokens") = 64,
          py::arg("temperature") = 0.0f, py::arg("top_p") = 1.0f, py::arg("seed") = 0,
          py::arg("stop") = py::none(), py::arg("stream") = false, py::arg("prefill_chunk") = 512,
          "Generates from prompt (a str, tokenized with BOS as `snapkv run` does, or token ids)\n"
          "with caches from cache (a snapkv.builder(...); None: snapkv, budget 512). Stops at an\n"
          "end-of-generation token, after max_tokens, at the first of the stop strings (cut\n"
          "before it) or at the model's context. Returns a Completion, or with stream=True a\n"
          "Stream yielding str pieces. temperature 0 = greedy; seed also seeds the random\n"
          "policy unless the builder sets seed.")
      .def(
          "chat",
          [](const std::shared_ptr<ModelHandle>& h, const std::vector<py::dict>& messages,
             const py::handle& cache, size_t max_tokens, float temperature, float top_p,
             uint64_t seed, std::optional<std::vector<std::string>> stop, bool stream,
             size_t prefill_chunk) {
            std::vector<ChatMessage> msgs;
            for (const py::dict& d : messages) {
              if (!d.contains("role") || !d.contains("content")) {
                throw_invalid(kComponent, "chat message", py::repr(d).cast<std::string>(),
                              "{'role': 'system'|'user'|'assistant', 'content': str}");
              }
              msgs.push_back({d["role"].cast<std::string>(), d["content"].cast<std::string>()});
            }
            if (msgs.empty()) throw_invalid(kComponent, "messages", "[]", ">= 1 message");
            const ChatTemplate t = ChatTemplate::from_gguf(h->model.file());
            const std::string rendered = t.render(msgs);
            // The render carries the special-token texts (and BOS where the template writes it):
            // parsed, nothing added, as `snapkv run --chat` tokenizes it.
            return run(h, check_prompt(*h, h->tokenizer.encode(rendered, false, true)), cache,
                       max_tokens, temperature, top_p, seed, std::move(stop), stream,
                       prefill_chunk);
          },
          py::arg("messages"), py::arg("cache") = py::none(), py::arg("max_tokens") = 64,
          py::arg("temperature") = 0.0f, py::arg("top_p") = 1.0f, py::arg("seed") = 0,
          py::arg("stop") = py::none(), py::arg("stream") = false, py::arg("prefill_chunk") = 512,
          "Like generate, for messages [{'role': ..., 'content': ...}] rendered with the model's\n"
          "chat template (tokenizer.chat_template; RuntimeError when the model has none).")
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
            const CacheConfig config =
                cache.is_none()
                    ? CacheBuilder("kvzip", 0.2, {}, py::dict()).config_for(tokens.size())
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
          py::arg("document"), py::arg("cache") = py::none(), py::arg("prefill_chunk") = 512,
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
      .def("ask", &ask, py::arg("question"), py::arg("max_tokens") = 32,
           py::arg("multiline") = false,
           "Greedy answer from a fresh copy of the cache with the question appended (as `snapkv\n"
           "ask`): up to max_tokens tokens, EOS or (unless multiline) the first newline.")
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
      py::arg("model"), py::arg("path"), py::arg("prefill_chunk") = 512,
      "Reads a .kvc file written for this model (by Doc.save or `snapkv compress`); a file for\n"
      "another model raises snapkv.Error.");
}

}  // namespace snapkv::python
