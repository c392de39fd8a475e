// One generation loop and one set of defaults for every front end: `snapkv run`, `ask`, `chat`,
// `serve`, the C ABI and the Python package all decode through generate() with a
// GenerationConfig whose defaults are the constants below.
//
//   GenerationConfig g;                    // the defaults
//   g.stop = {"\n\n"};
//   std::vector<float> logits = session.prefill(prompt);
//   GenerationResult r = generate(session, std::move(logits), tokenizer, g, prompt,
//                                 [](const GenerationPiece& p) { fputs(p.text.c_str(), stdout);
//                                                                return true; });
//
// Promises:
//  - Each step samples one token from the last logits (Sampler, model/sampler.h, with the history
//    prompt + generated for its penalties), then: an end-of-generation token (Tokenizer::is_eog)
//    ends with FinishReason::stop; ignore_eos bans those tokens from sampling instead (as
//    llama.cpp's --ignore-eos does), so generation runs to a stop string, max_tokens or the
//    context; otherwise the token is kept, its text appended, and the session decodes it only when
//    another token will be sampled (max_tokens not reached, context not full, no stop string seen),
//    so a run of n tokens costs n - 1 decode steps.
//  - Stop strings: generation ends as soon as the text holds one of `stop` (FinishReason::stop);
//    the text is cut before the earliest match and the token that completed it is the last of
//    `tokens`. Text that could still be the start of a stop string is held back from on_piece until
//    it cannot, so the streamed pieces joined always equal GenerationResult::text.
//  - max_tokens reached: FinishReason::length; the session's context full: FinishReason::context.
//  - on_piece returning false cancels: FinishReason::cancelled, the text so far kept.
//  - top_logprobs >= 0: each generated token carries its log-probability under
//    log_softmax(logits) (the model's distribution, before penalties and temperature) and the
//    top_logprobs most likely alternatives (ties: lower id first).
// Leaves out: prefill (the caller's: run, a loaded cache, a chat turn), beam search, grammars.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "snapkv/model/llama.h"
#include "snapkv/model/sampler.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/timer.h"

namespace snapkv {

// The defaults every front end shares (docs/CLI.md, "Defaults").
inline constexpr size_t kDefaultMaxTokens = 256;
// The cache method and kept fraction of commands whose prompt holds the question (run, chat,
// serve's completions): query-aware SnapKV.
inline constexpr std::string_view kDefaultMethod = "snapkv";
inline constexpr double kDefaultKeep = 0.2;
// The method of caches built before the questions are known (compress, serve's /v1/caches):
// the best question-agnostic method measured (docs/RESULTS.md).
inline constexpr std::string_view kDefaultDocumentMethod = "kvzip";

struct GenerationConfig {
  size_t max_tokens = kDefaultMaxTokens;  // >= 1
  SamplerConfig sampler;                  // greedy by default
  std::vector<std::string> stop;          // stop strings (non-empty each)
  bool ignore_eos = false;
  int top_logprobs = -1;  // -1: no log-probabilities; 0..20: the chosen token's and this many more
  // Positions the session may reach: 0 = the model's context_length; a smaller value ends
  // generation (FinishReason::context) there, as the model's own limit does (llama.cpp's -c).
  size_t context_limit = 0;

  // Throws std::invalid_argument "[generation] ..." on the first bad field.
  void validate() const;
};

enum class FinishReason { stop, length, context, cancelled };

// "stop", "length", "context", "cancelled".
std::string_view to_string(FinishReason reason);

struct TokenLogprob {
  int32_t id = 0;
  double logprob = 0.0;
};

struct GeneratedToken {
  int32_t id = 0;
  double logprob = 0.0;           // with top_logprobs >= 0
  std::vector<TokenLogprob> top;  // [top_logprobs] most likely first
};

// One piece of streamed text: the text released by this step (may be empty while a possible stop
// string is held back) and the token that produced it: its id (the last token's for the tail
// released at the end), and its log-probabilities with top_logprobs >= 0.
struct GenerationPiece {
  std::string_view text;
  const GeneratedToken* token = nullptr;  // with top_logprobs >= 0, else null
  int32_t id = -1;                        // -1 only when no token was generated
};

struct GenerationResult {
  std::vector<int32_t> tokens;          // [n] generated (an end token excluded)
  std::vector<GeneratedToken> details;  // [n] with top_logprobs >= 0, else empty
  std::string text;                     // the pieces joined, cut before a stop string
  FinishReason finish = FinishReason::length;
  // The end-of-generation token sampled last when it ended generation (not in tokens), else -1.
  int32_t end_token = -1;
  size_t decode_steps = 0;
  double decode_s = 0.0;  // seconds in sampling and decode steps
};

using PieceCallback = std::function<bool(const GenerationPiece&)>;

// Generates from `logits` [n_vocab] (the last prompt position's). `history`: the prompt's tokens
// (for the sampler's penalties; may be empty). Throws std::invalid_argument for a bad config.
// Is exactly: Generator g(...); while (auto t = g.step(logits, session.position_for(1)
// .value_or(n_ctx))) logits = session.decode(*t); return g.finish(); (an evicting cache goes on
// past the model's context by re-indexing, LlamaSession::position_for; the full cache stops.)
GenerationResult generate(LlamaSession& session, std::vector<float> logits,
                          const Tokenizer& tokenizer, const GenerationConfig& config,
                          std::span<const int32_t> history = {},
                          const PieceCallback& on_piece = {});

// The state of one sequence's generation, step by step, for callers that decode several
// sequences together (LlamaSession::decode_batch): sampling, stop strings, held-back text,
// log-probabilities and the finish reason exactly as generate() (which is built on it). The
// caller owns the session and decodes each token step() hands back before the next step().
class Generator {
 public:
  // `model_ctx`: the model's context_length (config.context_limit may lower it). Throws
  // std::invalid_argument for a bad config. The tokenizer must outlive the generator.
  Generator(const Tokenizer& tokenizer, const GenerationConfig& config, size_t model_ctx,
            std::span<const int32_t> history = {}, PieceCallback on_piece = {});

  // Samples from `logits` [n_vocab] (the last decoded position's; `n_past`: the session's
  // positions so far) and releases text to on_piece. Returns the token the caller must decode
  // next, or nothing when the sequence has finished (then call finish()).
  std::optional<int32_t> step(std::span<const float> logits, size_t n_past);
  // Ends the sequence now with FinishReason::cancelled (e.g. its client left) unless it already
  // finished.
  void cancel();
  bool done() const { return done_; }
  // The result: a held-back tail that never became a stop string is released as text, decode_s
  // set. Once, after step() returned nothing or after cancel().
  GenerationResult finish();

 private:
  bool release(size_t upto, int32_t id, const GeneratedToken* token);

  const Tokenizer* tokenizer_;
  GenerationConfig config_;
  PieceCallback on_piece_;
  Sampler sampler_;
  size_t n_ctx_ = 0;
  size_t longest_stop_ = 0;
  std::vector<int32_t> seen_;
  GenerationResult r_;
  size_t emitted_ = 0;  // bytes of r_.text passed to on_piece
  bool done_ = false;
  Timer timer_;
};

// Log-probabilities of `id` and of the k most likely tokens under log_softmax(logits).
GeneratedToken token_logprobs(std::span<const float> logits, int32_t id, size_t k);

}  // namespace snapkv
