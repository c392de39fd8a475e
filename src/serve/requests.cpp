// Request parsing for the server (serve/requests.h), with nlohmann::json.
#include "serve/requests.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "snapkv/kv/core/spec_json.h"

namespace snapkv::serve {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& message) {
  bad_request(message);
}

json parse_object(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) bad("body is not valid JSON");
  if (!j.is_object()) bad("body must be a JSON object, got " + std::string(j.type_name()));
  return j;
}

// The cache spec's options a request may set beside method/keep/budget/codec: every option that
// is not part of a method name or the budget (kv/core/spec.h). "seed" is the request's sampling
// seed, not the random policy's.
bool is_request_option(const CacheOption* o) {
  return o != nullptr && o->group != OptionGroup::method && o->group != OptionGroup::sizing &&
         o->name != "seed";
}

void check_fields(const json& j, const std::set<std::string>& allowed, bool cache_fields) {
  for (const auto& [key, value] : j.items()) {
    if (allowed.count(key)) continue;
    if (cache_fields && is_request_option(find_cache_option(key))) continue;
    bad("unknown field '" + key + "'");
  }
}

bool given(const json& j, const char* key) {
  return j.contains(key) && !j[key].is_null();
}

std::string get_string(const json& j, const char* key, bool required) {
  if (!given(j, key)) {
    if (required) bad(std::string("missing field '") + key + "'");
    return {};
  }
  if (!j[key].is_string()) bad(std::string("field '") + key + "' must be a string");
  return j[key].get<std::string>();
}

std::optional<double> get_number(const json& j, const char* key) {
  if (!given(j, key)) return std::nullopt;
  if (!j[key].is_number()) bad(std::string("field '") + key + "' must be a number");
  return j[key].get<double>();
}

std::optional<size_t> get_count(const json& j, const char* key) {
  if (!given(j, key)) return std::nullopt;
  if (!j[key].is_number_unsigned()) {
    bad(std::string("field '") + key + "' must be a non-negative integer");
  }
  return j[key].get<size_t>();
}

bool get_bool(const json& j, const char* key) {
  if (!given(j, key)) return false;
  if (!j[key].is_boolean()) bad(std::string("field '") + key + "' must be true or false");
  return j[key].get<bool>();
}

CacheOptions get_cache_options(const json& j) {
  CacheOptions c;
  c.method = get_string(j, "method", false);
  c.keep = get_number(j, "keep");
  if (c.keep && !(*c.keep > 0.0 && *c.keep <= 1.0)) bad("field 'keep' must be in (0, 1]");
  c.budget = get_count(j, "budget");
  if (c.budget && *c.budget == 0) bad("field 'budget' must be >= 1");
  if (c.keep && c.budget) bad("give one of 'keep' and 'budget'");
  c.codec = get_string(j, "codec", false);
  for (const auto& [key, value] : j.items()) {
    const CacheOption* o = find_cache_option(key);
    if (!is_request_option(o) || value.is_null()) continue;
    try {
      c.options.emplace_back(key, check_option_value(*o, option_value_from_json(key, value)));
    } catch (const std::invalid_argument& e) {
      bad(e.what());
    }
  }
  return c;
}

// A token id list: every element an integer in [0, 2^31).
std::vector<int32_t> get_token_ids(const json& a, const std::string& what) {
  std::vector<int32_t> ids;
  for (const json& t : a) {
    if (!t.is_number_unsigned() ||
        t.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max())) {
      bad(what + " must hold token ids (non-negative integers)");
    }
    ids.push_back(static_cast<int32_t>(t.get<uint64_t>()));
  }
  return ids;
}

// prompt: a string, a list of strings, a list of token ids, or a list of lists of token ids.
std::vector<PromptInput> get_prompts(const json& j) {
  if (!given(j, "prompt")) bad("missing field 'prompt'");
  const json& p = j["prompt"];
  if (p.is_string()) return {PromptInput{p.get<std::string>(), {}}};
  if (!p.is_array() || p.empty()) {
    bad("field 'prompt' must be a string, a list of strings or a list of token ids");
  }
  if (p.front().is_number()) return {PromptInput{{}, get_token_ids(p, "field 'prompt'")}};
  std::vector<PromptInput> prompts;
  for (const json& e : p) {
    if (e.is_string()) {
      prompts.push_back({e.get<std::string>(), {}});
    } else if (e.is_array() && !e.empty()) {
      prompts.push_back({{}, get_token_ids(e, "each element of 'prompt'")});
    } else {
      bad("each element of 'prompt' must be a string or a non-empty list of token ids");
    }
  }
  return prompts;
}

// A message's content: a string, null (an assistant turn that only called tools), or a list of
// parts of type "text" (or "refusal"), joined.
std::string get_content(const json& m) {
  if (!given(m, "content")) return {};
  const json& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad("a message's 'content' must be a string or a list of content parts");
  std::string text;
  for (const json& part : c) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      bad("each content part must be an object with a 'type'");
    }
    const std::string type = part["type"].get<std::string>();
    const char* key = type == "text" ? "text" : type == "refusal" ? "refusal" : nullptr;
    if (key == nullptr) {
      bad("content parts of type '" + type + "' are not supported: this model reads text only");
    }
    text += get_string(part, key, true);
  }
  return text;
}

std::vector<ChatMessage> get_messages(const json& j) {
  if (!given(j, "messages") || !j["messages"].is_array() || j["messages"].empty()) {
    bad("field 'messages' must be a non-empty array");
  }
  std::vector<ChatMessage> messages;
  for (const json& m : j["messages"]) {
    if (!m.is_object()) bad("each message must be an object");
    check_fields(m,
                 {"role", "content", "name", "tool_calls", "tool_call_id", "function_call",
                  "refusal", "audio"},
                 false);
    std::string role = get_string(m, "role", true);
    if (role == "developer") role = "system";
    if (role == "tool" || role == "function") {
      bad("messages of role '" + role + "' answer tool calls, which this server never makes");
    }
    if (role != "system" && role != "user" && role != "assistant") {
      bad("message role '" + role + "' is not system, developer, user or assistant");
    }
    if (role != "assistant" && !given(m, "content")) bad("a " + role + " message needs 'content'");
    get_string(m, "name", false);  // type-checked; templates have no place for it
    messages.push_back({role, get_content(m)});
  }
  return messages;
}

std::vector<std::string> get_stop(const json& j) {
  if (!given(j, "stop")) return {};
  const json& s = j["stop"];
  std::vector<std::string> stop;
  if (s.is_string()) {
    stop.push_back(s.get<std::string>());
  } else if (s.is_array()) {
    for (const json& e : s) {
      if (!e.is_string()) bad("field 'stop' must be a string or a list of strings");
      stop.push_back(e.get<std::string>());
    }
  } else {
    bad("field 'stop' must be a string or a list of strings");
  }
  if (stop.size() > 16)
    bad("field 'stop' holds " + std::to_string(stop.size()) + " strings, at most 16");
  for (const std::string& e : stop) {
    if (e.empty()) bad("field 'stop' holds an empty string");
  }
  return stop;
}

// Requests that need what the engine cannot do are refused; the rest of the tool fields are
// accepted and ignored (the model answers in text).
void check_unsupported(const json& j) {
  if (given(j, "response_format")) {
    const json& f = j["response_format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string()) {
      bad("field 'response_format' must be an object with a 'type'");
    }
    if (f["type"] != "text") {
      bad("response_format '" + f["type"].get<std::string>() +
          "' is not supported: this server cannot constrain output to JSON; use 'text'");
    }
  }
  for (const char* key : {"tool_choice", "function_call"}) {
    if (!given(j, key)) continue;
    const json& c = j[key];
    if (c.is_string() && (c == "none" || c == "auto")) continue;
    bad(std::string("field '") + key +
        "' requires a tool call, which this server cannot make; use 'auto' or 'none'");
  }
}

// OpenAI's logit_bias: {"<token id>": bias in [-100, 100]}; llama-server's false bans the token.
// Ids are checked against the vocabulary where the request is run.
std::vector<std::pair<int32_t, float>> get_logit_bias(const json& j) {
  std::vector<std::pair<int32_t, float>> out;
  if (!given(j, "logit_bias")) return out;
  const json& m = j["logit_bias"];
  if (!m.is_object()) bad("field 'logit_bias' must be an object of token id -> bias");
  for (const auto& [key, value] : m.items()) {
    const bool digits =
        !key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos;
    if (!digits) bad("field 'logit_bias' has key '" + key + "', expected a token id (0-999999999)");
    const auto id = static_cast<int32_t>(std::stol(key));
    if (value.is_boolean() && !value.get<bool>()) {
      out.emplace_back(id, -std::numeric_limits<float>::infinity());
      continue;
    }
    if (!value.is_number()) {
      bad("field 'logit_bias' of token " + key + " must be a number in [-100, 100] or false");
    }
    const double bias = value.get<double>();
    if (!(bias >= -100.0 && bias <= 100.0)) {
      bad("field 'logit_bias' of token " + key + " must be in [-100, 100]");
    }
    out.emplace_back(id, static_cast<float>(bias));
  }
  return out;
}

}  // namespace

CompletionRequest parse_completion(const std::string& body, bool chat) {
  const json j = parse_object(body);
  std::set<std::string> allowed = {
      // OpenAI, both routes
      "model", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n", "presence_penalty",
      "seed", "stop", "stream", "stream_options", "temperature", "top_p", "user",
      // llama-server's sampling extensions
      "top_k", "min_p", "repeat_penalty", "repeat_last_n", "ignore_eos",
      // this server's compressed caches
      "cache_id", "method", "keep", "budget", "codec"};
  if (chat) {
    for (const char* k : {"messages",
                          "audio",
                          "function_call",
                          "functions",
                          "max_completion_tokens",
                          "metadata",
                          "modalities",
                          "parallel_tool_calls",
                          "prediction",
                          "prompt_cache_key",
                          "prompt_cache_retention",
                          "reasoning_effort",
                          "response_format",
                          "safety_identifier",
                          "service_tier",
                          "store",
                          "tool_choice",
                          "tools",
                          "top_logprobs",
                          "verbosity",
                          "web_search_options"}) {
      allowed.insert(k);
    }
  } else {
    for (const char* k : {"prompt", "best_of", "echo", "suffix"}) allowed.insert(k);
  }
  check_fields(j, allowed, true);
  check_unsupported(j);
  CompletionRequest r;
  r.model = get_string(j, "model", false);
  if (chat) {
    r.messages = get_messages(j);
  } else {
    r.prompts = get_prompts(j);
    r.echo = get_bool(j, "echo");
    get_string(j, "suffix", false);
    get_count(j, "best_of");
  }
  r.max_tokens = get_count(j, "max_tokens");
  if (chat) {
    if (auto m = get_count(j, "max_completion_tokens")) r.max_tokens = m;
  }
  if (r.max_tokens && *r.max_tokens == 0) bad("field 'max_tokens' must be >= 1");
  if (auto n = get_count(j, "n")) {
    if (*n == 0) bad("field 'n' must be >= 1");
    r.n = *n;
  }
  r.stream = get_bool(j, "stream");
  if (given(j, "stream_options")) {
    if (!j["stream_options"].is_object()) bad("field 'stream_options' must be an object");
    r.include_usage = get_bool(j["stream_options"], "include_usage");
  }
  SamplerConfig& s = r.sampler;
  if (auto t = get_number(j, "temperature")) {
    if (!(*t >= 0.0 && *t <= 2.0)) bad("field 'temperature' must be in [0, 2]");
    s.temperature = static_cast<float>(*t);
  }
  if (auto p = get_number(j, "top_p")) s.top_p = static_cast<float>(*p);
  if (auto k = get_count(j, "top_k")) s.top_k = *k;
  if (auto p = get_number(j, "min_p")) s.min_p = static_cast<float>(*p);
  if (auto p = get_number(j, "repeat_penalty")) s.repeat_penalty = static_cast<float>(*p);
  if (auto n = get_count(j, "repeat_last_n")) s.repeat_last_n = *n;
  if (auto p = get_number(j, "presence_penalty")) s.presence_penalty = static_cast<float>(*p);
  if (auto p = get_number(j, "frequency_penalty")) s.frequency_penalty = static_cast<float>(*p);
  if (given(j, "seed")) {
    if (!j["seed"].is_number_integer()) bad("field 'seed' must be an integer");
    s.seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>()
                                            : static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  s.logit_bias = get_logit_bias(j);
  try {
    s.validate();
  } catch (const std::invalid_argument& e) {
    bad(e.what());
  }
  r.stop = get_stop(j);
  r.ignore_eos = get_bool(j, "ignore_eos");
  if (chat) {
    const bool logprobs = get_bool(j, "logprobs");
    const std::optional<size_t> top = get_count(j, "top_logprobs");
    if (top && *top > 20) bad("field 'top_logprobs' must be in [0, 20]");
    if (top && !logprobs) bad("field 'top_logprobs' needs 'logprobs': true");
    if (logprobs) r.top_logprobs = static_cast<int>(top.value_or(0));
  } else if (auto lp = get_count(j, "logprobs")) {
    if (*lp > 20) bad("field 'logprobs' must be in [0, 20]");
    r.top_logprobs = static_cast<int>(*lp);
  }
  if (j.contains("cache_id")) {
    r.cache_id = get_string(j, "cache_id", true);
    if (r.cache_id.empty()) bad("field 'cache_id' is empty; leave it out to send no cache");
  }
  r.cache = get_cache_options(j);
  if (!r.cache_id.empty() && r.cache.any()) {
    bad("cache options apply when a cache is created, not with 'cache_id'");
  }
  return r;
}

CacheRequest parse_cache_request(const std::string& body) {
  const json j = parse_object(body);
  check_fields(j, {"document", "method", "keep", "budget", "codec", "save"}, true);
  CacheRequest r;
  r.document = get_string(j, "document", true);
  if (r.document.empty()) bad("field 'document' is empty");
  r.cache = get_cache_options(j);
  r.save = get_bool(j, "save");
  return r;
}

TokenizeRequest parse_tokenize(const std::string& body) {
  const json j = parse_object(body);
  check_fields(j, {"content", "add_special", "parse_special", "with_pieces"}, false);
  TokenizeRequest r;
  r.content = get_string(j, "content", true);
  if (given(j, "add_special")) r.add_special = get_bool(j, "add_special");
  r.parse_special = get_bool(j, "parse_special");
  r.with_pieces = get_bool(j, "with_pieces");
  return r;
}

std::vector<int32_t> parse_detokenize(const std::string& body) {
  const json j = parse_object(body);
  check_fields(j, {"tokens"}, false);
  if (!given(j, "tokens") || !j["tokens"].is_array()) bad("field 'tokens' must be a list");
  return get_token_ids(j["tokens"], "field 'tokens'");
}

}  // namespace snapkv::serve
