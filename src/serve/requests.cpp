// Request parsing for the server (serve/requests.h), with nlohmann::json.
#include "serve/requests.h"

#include <nlohmann/json.hpp>
#include <set>

#include "snapkv/kv/core/spec_json.h"

namespace snapkv::serve {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& message) {
  throw HttpError(400, "invalid_request_error", message);
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

std::string get_string(const json& j, const char* key, bool required) {
  if (!j.contains(key)) {
    if (required) bad(std::string("missing field '") + key + "'");
    return {};
  }
  if (!j[key].is_string()) bad(std::string("field '") + key + "' must be a string");
  return j[key].get<std::string>();
}

std::optional<double> get_number(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number()) bad(std::string("field '") + key + "' must be a number");
  return j[key].get<double>();
}

std::optional<size_t> get_count(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number_unsigned()) {
    bad(std::string("field '") + key + "' must be a non-negative integer");
  }
  return j[key].get<size_t>();
}

bool get_bool(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return false;
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

}  // namespace

CompletionRequest parse_completion(const std::string& body, bool chat) {
  const json j = parse_object(body);
  check_fields(j,
               {"model", chat ? "messages" : "prompt", "max_tokens", "stream", "temperature",
                "top_p", "seed", "cache_id", "method", "keep", "budget", "codec"},
               true);
  CompletionRequest r;
  r.model = get_string(j, "model", false);
  if (chat) {
    if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty()) {
      bad("field 'messages' must be a non-empty array");
    }
    for (const json& m : j["messages"]) {
      if (!m.is_object()) bad("each message must be an object");
      check_fields(m, {"role", "content"}, false);
      ChatMessage msg{get_string(m, "role", true), get_string(m, "content", true)};
      if (msg.role != "system" && msg.role != "user" && msg.role != "assistant") {
        bad("message role '" + msg.role + "' is not system, user or assistant");
      }
      r.messages.push_back(std::move(msg));
    }
  } else {
    r.prompt = get_string(j, "prompt", true);
    if (r.prompt.empty()) bad("field 'prompt' is empty");
  }
  r.max_tokens = get_count(j, "max_tokens");
  if (r.max_tokens && *r.max_tokens == 0) bad("field 'max_tokens' must be >= 1");
  r.stream = get_bool(j, "stream");
  if (auto t = get_number(j, "temperature")) r.temperature = static_cast<float>(*t);
  if (auto p = get_number(j, "top_p")) r.top_p = static_cast<float>(*p);
  if (auto s = get_count(j, "seed")) r.seed = *s;
  r.cache_id = get_string(j, "cache_id", false);
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

}  // namespace snapkv::serve
