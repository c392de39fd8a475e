// The OpenAI routes of the server (serve/server.h): /v1/completions, /v1/chat/completions (plain
// JSON or server-sent events) and /v1/models. Every choice samples through model/generation.h's
// Generator (generate()'s loop) and decodes in the batched steps of serve/decode_batcher.h; n
// choices of one prompt share its prefill (the prefilled session is cloned).
#include <chrono>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "serve/server_impl.h"
#include "snapkv/model/generation.h"

namespace snapkv::serve {
namespace {

// One prompt of a request: what to prefill (or append to a cached document) and its limits.
struct Job {
  std::vector<int32_t> tokens;
  std::string echo_text;  // the prompt's text, for echo
  size_t max_tokens = 0;
};

std::string finish_string(FinishReason f) {
  return f == FinishReason::stop ? "stop" : "length";
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (const char c : s) b.push_back(static_cast<unsigned char>(c));
  return b;
}

// Chat's logprobs entry of one token: {token, logprob, bytes, top_logprobs: [...]}.
json chat_logprob(const Tokenizer& tok, const GeneratedToken& t) {
  const std::string piece = tok.token_to_piece(t.id);
  json top = json::array();
  for (const TokenLogprob& alt : t.top) {
    const std::string p = tok.token_to_piece(alt.id);
    top.push_back({{"token", p}, {"logprob", alt.logprob}, {"bytes", bytes_of(p)}});
  }
  return {
      {"token", piece}, {"logprob", t.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}};
}

// Completions' logprobs of tokens: {tokens, token_logprobs, top_logprobs, text_offset}.
json completion_logprobs(const Tokenizer& tok, const std::vector<GeneratedToken>& details,
                         size_t offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const GeneratedToken& t : details) {
    const std::string piece = tok.token_to_piece(t.id);
    tokens.push_back(piece);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const TokenLogprob& alt : t.top) top[tok.token_to_piece(alt.id)] = alt.logprob;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += piece.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

// Runs every job and choice of one request; the callbacks see each piece and each finished
// choice. Owned by the handler (plain JSON) or by the stream's content provider.
struct Run {
  Run(Server::Impl& s, CompletionRequest r, bool is_chat)
      : server(s), request(std::move(r)), chat(is_chat) {}

  Server::Impl& server;
  CompletionRequest request;
  bool chat = false;
  std::vector<Job> jobs;
  std::shared_ptr<const StoredPrompt> doc;
  Reuse reuse;         // of the last prompt run
  CacheConfig config;  // without doc
  std::string method;
  GenerationConfig generation;
  std::shared_ptr<WorkQueue::Ticket> ticket;
  // Filled by run():
  size_t prompt_tokens = 0, completion_tokens = 0;
  size_t choices_done = 0;  // choices finished so far (the last one's event carries "snapkv")
  double prefill_s = 0.0, decode_s = 0.0;
  CacheStats stats;

  // on_piece(choice, piece) -> false cancels; on_done(choice, job, result).
  using OnPiece = std::function<bool(size_t, const GenerationPiece&)>;
  using OnDone = std::function<void(size_t, const Job&, const GenerationResult&)>;

  // Returns false when a choice was cancelled (the rest are skipped).
  bool run(const OnPiece& on_piece, const OnDone& on_done,
           const std::function<void(size_t)>& on_start) {
    for (size_t ji = 0; ji < jobs.size(); ++ji) {
      const Job& job = jobs[ji];
      const auto t0 = std::chrono::steady_clock::now();
      std::pair<LlamaSession, std::vector<float>> started =
          doc ? std::pair{doc->session.clone(), std::vector<float>{}}
              : server.start_prompt(job.tokens, config, method, reuse);
      if (doc) {
        started.second = started.first.extend(job.tokens);
        reuse = {"document", doc->tokens.size()};
      }
      prefill_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const CacheStats s = started.first.cache_stats();
      // The state a choice decodes from: a copy, or the prefilled one itself for the last.
      auto state_for = [&started](bool last) {
        return last ? std::move(started)
                    : std::pair<LlamaSession, std::vector<float>>{started.first.clone(),
                                                                  started.second};
      };
      stats.tokens_seen += s.tokens_seen;
      stats.rows_kept += s.rows_kept;
      stats.kv_heads = s.kv_heads;
      stats.bytes_stored += s.bytes_stored;
      stats.bytes_full_fp16 += s.bytes_full_fp16;
      prompt_tokens += (doc ? doc->tokens.size() : 0) + job.tokens.size();
      // The n choices run together: each samples and streams on its own (a Generator, the
      // loop of generate()), and their decode steps go into the shared batched steps
      // (serve/decode_batcher.h) along with the other running requests'.
      const size_t n = request.n;
      std::vector<LlamaSession> sessions;
      std::vector<std::vector<float>> logits;
      std::vector<Generator> gens;
      std::vector<std::unique_ptr<DecodeBatcher::Member>> members;
      sessions.reserve(n);
      gens.reserve(n);
      for (size_t j = 0; j < n; ++j) {
        const size_t choice = ji * n + j;
        auto [session, first_logits] = state_for(j + 1 == n);
        sessions.push_back(std::move(session));
        logits.push_back(std::move(first_logits));
        GenerationConfig g = generation;
        g.max_tokens = job.max_tokens;
        g.sampler.seed = request.sampler.seed + j;
        gens.emplace_back(server.tokenizer, g, server.model.config().n_ctx, job.tokens,
                          [this, &on_piece, choice](const GenerationPiece& p) {
                            return !server.stopping.load() && on_piece(choice, p);
                          });
        if (on_start) on_start(choice);
        members.push_back(server.batcher.join());
      }
      while (true) {
        std::vector<LlamaSession*> step;
        std::vector<int32_t> tokens;
        std::vector<size_t> who;
        for (size_t j = 0; j < n; ++j) {
          if (!members[j]) continue;  // finished
          if (const std::optional<int32_t> t = gens[j].step(logits[j], sessions[j].n_past())) {
            step.push_back(&sessions[j]);
            tokens.push_back(*t);
            who.push_back(j);
            continue;
          }
          members[j].reset();  // out of the running set before its last events are written
          const GenerationResult result = gens[j].finish();
          completion_tokens += result.tokens.size();
          decode_s += result.decode_s;
          if (result.finish == FinishReason::cancelled) return false;
          ++choices_done;
          on_done(ji * n + j, job, result);
        }
        if (step.empty()) break;
        std::vector<std::vector<float>> next = server.batcher.decode(step, tokens);
        for (size_t b = 0; b < who.size(); ++b) logits[who[b]] = std::move(next[b]);
      }
    }
    return true;
  }

  json usage() const {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}};
  }

  // What compression did for this request.
  json snapkv() const {
    json j = {{"method", doc ? doc->method : method},
              {"budget", doc ? doc->config.budget : config.budget},
              {"rows_kept", stats.rows_kept},
              {"rows_seen", stats.tokens_seen * stats.kv_heads},
              {"kv_bytes", stats.bytes_stored},
              {"kv_bytes_full_fp16", stats.bytes_full_fp16},
              {"prefill_ms", prefill_s * 1e3},
              {"decode_ms", decode_s * 1e3},
              {"reused", reuse.kind != "none"},
              {"reuse", reuse.kind},
              {"reused_tokens", reuse.tokens}};
    j["keep"] = doc || request.cache.budget
                    ? json(nullptr)
                    : json(request.cache.keep.value_or(server.options.default_keep));
    if (doc) j["cache_id"] = doc->id;
    return j;
  }

  void record() const {
    RequestRecord& r = current_record();
    r.prompt_tokens = prompt_tokens;
    r.completion_tokens = completion_tokens;
    r.kv_bytes = stats.bytes_stored;
    r.prefill_s = prefill_s;
    r.decode_s = decode_s;
    r.reused = reuse.kind != "none";
  }
};

}  // namespace

json Server::Impl::models_json() const {
  json data = json::array();
  for (const std::string& id : model_ids) {
    data.push_back({{"id", id},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "snapkv"},
                    {"context_length", model.config().n_ctx}});
  }
  return {{"object", "list"}, {"data", data}};
}

void Server::Impl::completion(const http::Request& req, http::Response& res, bool chat) {
  auto run = std::make_shared<Run>(*this, parse_completion(req.body, chat), chat);
  CompletionRequest& r = run->request;
  const size_t n_prompts = chat ? 1 : r.prompts.size();
  if (r.n * n_prompts > options.max_n) {
    bad_request("n x prompts = " + std::to_string(r.n * n_prompts) + " choices, at most " +
                std::to_string(options.max_n) + " (--max-n)");
  }
  const size_t n_ctx = model.config().n_ctx;
  if (r.max_tokens && *r.max_tokens > n_ctx) {
    bad_request("max_tokens " + std::to_string(*r.max_tokens) + " exceeds the context of " +
                std::to_string(n_ctx) + " tokens");
  }
  if (!r.cache_id.empty()) run->doc = find(r.cache_id);
  const size_t cached = run->doc ? run->doc->tokens.size() : 0;
  for (size_t i = 0; i < n_prompts; ++i) {
    Job job;
    if (chat) {
      job.tokens = chat_tokens(r.messages, run->doc != nullptr);
    } else {
      job.tokens = prompt_tokens(r.prompts[i], run->doc != nullptr);
      job.echo_text =
          r.prompts[i].tokens.empty() ? r.prompts[i].text : tokenizer.decode(r.prompts[i].tokens);
    }
    if (r.max_tokens) {
      job.max_tokens = *r.max_tokens;
    } else {  // the default, shortened to what the context leaves
      check_fits(job.tokens, cached, 1);
      job.max_tokens = std::min(options.default_max_tokens, n_ctx - cached - job.tokens.size());
    }
    check_fits(job.tokens, cached, job.max_tokens);
    run->jobs.push_back(std::move(job));
  }
  if (!run->doc) {
    size_t longest = 0;
    for (const Job& j : run->jobs) longest = std::max(longest, j.tokens.size());
    run->config = make_config(r.cache, longest, run->method);
  }
  for (const auto& [token, bias] : r.sampler.logit_bias) {
    if (static_cast<size_t>(token) >= tokenizer.n_vocab()) {
      bad_request("field 'logit_bias' names token " + std::to_string(token) +
                  ", outside the vocabulary of " + std::to_string(tokenizer.n_vocab()));
    }
  }
  run->generation.sampler = r.sampler;
  run->generation.stop = r.stop;
  run->generation.ignore_eos = r.ignore_eos;
  run->generation.top_logprobs = r.top_logprobs;
  try {
    run->generation.validate();
  } catch (const std::invalid_argument& e) {
    bad_request(e.what());
  }
  const std::string id = new_id(chat ? "chatcmpl-" : "cmpl-");
  current_record().id = id;
  const std::time_t created = std::time(nullptr);
  const std::string model_name = r.model.empty() ? options.model_id : r.model;
  run->ticket = take_slot();

  if (!r.stream) {
    std::vector<json> choices(run->jobs.size() * r.n);
    const bool done = run->run(
        [](size_t, const GenerationPiece&) { return true; },
        [&](size_t choice, const Job& job, const GenerationResult& g) {
          json c = {{"index", choice}, {"finish_reason", finish_string(g.finish)}};
          if (chat) {
            c["message"] = {{"role", "assistant"}, {"content", g.text}, {"refusal", nullptr}};
            c["logprobs"] = nullptr;
            if (r.top_logprobs >= 0) {
              json content = json::array();
              for (const GeneratedToken& t : g.details)
                content.push_back(chat_logprob(tokenizer, t));
              c["logprobs"] = {{"content", content}, {"refusal", nullptr}};
            }
          } else {
            const std::string prefix = r.echo ? job.echo_text : "";
            c["text"] = prefix + g.text;
            c["logprobs"] = r.top_logprobs >= 0
                                ? completion_logprobs(tokenizer, g.details, prefix.size())
                                : json(nullptr);
          }
          choices[choice] = std::move(c);
        },
        {});
    run->record();
    if (!done) throw HttpError(503, "shutting_down", "the server is shutting down");
    send_json(res, {{"id", id},
                    {"object", chat ? "chat.completion" : "text_completion"},
                    {"created", created},
                    {"model", model_name},
                    {"system_fingerprint", nullptr},
                    {"choices", choices},
                    {"usage", run->usage()},
                    {"snapkv", run->snapkv()}});
    return;
  }

  const std::string object = chat ? "chat.completion.chunk" : "text_completion";
  res.set_chunked_content_provider("text/event-stream", [this, run, id, created, model_name,
                                                         object](size_t, http::DataSink& sink) {
    const CompletionRequest& rq = run->request;
    const bool is_chat = run->chat;
    auto send = [&](const json& j) {
      const std::string line = "data: " + dump(j) + "\n\n";
      return sink.is_writable() && sink.write(line.data(), line.size());
    };
    auto chunk = [&](json choices) {
      return json{{"id", id},
                  {"object", object},
                  {"created", created},
                  {"model", model_name},
                  {"system_fingerprint", nullptr},
                  {"choices", std::move(choices)}};
    };
    auto event = [&](size_t index, const std::string& text, const json& logprobs,
                     const json& finish) {
      json c = {{"index", index}, {"finish_reason", finish}, {"logprobs", logprobs}};
      if (is_chat) {
        c["delta"] = finish.is_null() ? json{{"content", text}} : json::object();
      } else {
        c["text"] = text;
      }
      return send(chunk(json::array({c})));
    };
    bool ok = true;
    try {
      ok = run->run(
          [&](size_t choice, const GenerationPiece& p) {
            const bool with_lp = rq.top_logprobs >= 0 && p.token != nullptr;
            if (p.text.empty() && !with_lp) return true;
            json lp = nullptr;
            if (with_lp) {
              lp = is_chat ? json{{"content", json::array({chat_logprob(tokenizer, *p.token)})},
                                  {"refusal", nullptr}}
                           : completion_logprobs(tokenizer, {*p.token}, 0);
            }
            return event(choice, std::string(p.text), lp, nullptr);
          },
          [&](size_t choice, const Job&, const GenerationResult& g) {
            json c = {{"index", choice},
                      {"finish_reason", finish_string(g.finish)},
                      {"logprobs", nullptr}};
            if (is_chat) {
              c["delta"] = json::object();
            } else {
              c["text"] = "";
            }
            json j = chunk(json::array({c}));
            if (run->choices_done == run->jobs.size() * rq.n) j["snapkv"] = run->snapkv();
            send(j);
          },
          [&](size_t choice) {
            if (is_chat) {  // the first delta of a choice carries the role
              json c = {{"index", choice},
                        {"delta", {{"role", "assistant"}, {"content", ""}, {"refusal", nullptr}}},
                        {"logprobs", nullptr},
                        {"finish_reason", nullptr}};
              send(chunk(json::array({c})));
            } else if (rq.echo) {
              event(choice, run->jobs[choice / rq.n].echo_text, nullptr, nullptr);
            }
          });
    } catch (const std::exception& e) {
      const std::string line = "data: " + error_body(e.what(), "server_error", 500) + "\n\n";
      sink.write(line.data(), line.size());
      ok = false;
    }
    run->record();
    if (ok) {
      if (rq.include_usage) {  // OpenAI's usage chunk: no choices
        json last = chunk(json::array());
        last["usage"] = run->usage();
        last["snapkv"] = run->snapkv();
        send(last);
      }
      const std::string done = "data: [DONE]\n\n";
      if (sink.is_writable()) sink.write(done.data(), done.size());
    }
    run->ticket.reset();  // the model worker is free before the connection closes
    sink.done();
    return true;
  });
}

}  // namespace snapkv::serve
