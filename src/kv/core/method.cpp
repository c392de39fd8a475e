// Method names -> CacheConfig, and the keep/budget rule (kv/core/method.h).
#include "snapkv/kv/core/method.h"

#include <cmath>
#include <set>
#include <sstream>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {

constexpr const char* kPolicyNames =
    "full, snapkv, snapkv-proxy, streaming, chunkkv, knorm, random, kvzip, kvzip_plus, kvzap, "
    "kvzap-snapkv, kvzap-proxy, keydiff, "
    "expected_attention, "
    "expected_attention-proxy, each scoring one also as ada-<policy>, pyramid-<policy>, "
    "ada-pyramid-<policy>, and each evicting one but streaming behind duo- (duo-snapkv, "
    "duo-ada-kvzip, duo-pyramid-kvzap)";

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return std::string(s.substr(b, e - b));
}

// Applies a policy name (with its allocation prefixes) to config; false when the name is no
// policy. A prefix on a policy that cannot take it (ada-streaming, pyramid-full, duo-streaming)
// is no policy.
bool apply_policy(std::string_view full_name, CacheConfig& config) {
  const std::string_view name = apply_allocation_prefix(full_name, config);
  const bool prefixed = name.size() != full_name.size();
  if (prefixed && (name == "full" || name.empty())) return false;
  if (name == "full") {
    config.policy = PolicyKind::full;
  } else if (name == "snapkv") {
    config.policy = PolicyKind::snapkv;
    config.query_source = QuerySource::queries;
  } else if (name == "snapkv-proxy") {
    config.policy = PolicyKind::snapkv;
    config.query_source = QuerySource::keys;
  } else if (name == "streaming") {
    config.policy = PolicyKind::streaming;
  } else if (name == "chunkkv") {
    config.policy = PolicyKind::chunkkv;
    config.query_source = QuerySource::queries;
  } else if (name == "knorm") {
    config.policy = PolicyKind::knorm;
  } else if (name == "random") {
    config.policy = PolicyKind::random;
  } else if (name == "keydiff") {
    config.policy = PolicyKind::keydiff;
  } else if (name == "expected_attention") {
    config.policy = PolicyKind::expected_attention;
    config.query_source = QuerySource::queries;
  } else if (name == "expected_attention-proxy") {
    config.policy = PolicyKind::expected_attention;
    config.query_source = QuerySource::keys;
  } else if (name == "kvzip") {
    config.policy = PolicyKind::kvzip;
  } else if (name == "kvzap") {
    config.policy = PolicyKind::kvzap;
  } else if (name == "kvzap-snapkv") {
    config.policy = PolicyKind::kvzap_snapkv;
    config.query_source = QuerySource::queries;
  } else if (name == "kvzap-proxy") {
    config.policy = PolicyKind::kvzap_snapkv;
    config.query_source = QuerySource::keys;
  } else if (name == "kvzip_plus") {
    config.policy = PolicyKind::kvzip_plus;
  } else {
    return false;
  }
  if (head_allocation_duo(config.head_allocation) && config.policy == PolicyKind::streaming) {
    return false;
  }
  return !head_allocation_ada(config.head_allocation) || policy_scores_rows(config.policy);
}

// The codecs a method may name: every built one but fp16 (the default of every policy, so not a
// method name), by the codec grammar (kv/core/codec_spec.h).
std::string codec_names() {
  return std::string(codec_grammar()) + "; built: " + std::string(built_codec_names());
}

// Applies a codec name to config; false when the codec grammar does not parse it or it names
// fp16. A well-formed name no store implements is refused by the registry, naming the built ones.
bool apply_codec(std::string_view name, CacheConfig& config) {
  CodecSpec spec;
  try {
    spec = parse_codec_spec(name);
  } catch (const std::invalid_argument&) {
    return false;
  }
  const CodecKind codec = codec_kind(spec);
  if (codec == CodecKind::fp16) return false;
  config.codec = codec;
  return true;
}

}  // namespace

std::vector<std::string> split_list(std::string_view list) {
  std::vector<std::string> out;
  if (trim(list).empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    out.push_back(
        trim(list.substr(start, comma == std::string_view::npos ? list.npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Method parse_method(std::string_view name, const CacheConfig& knobs) {
  Method m;
  m.name = trim(name);
  CacheConfig& c = m.config;
  c = knobs;
  const CacheConfig fresh;
  c.policy = fresh.policy;
  c.codec = fresh.codec;
  c.head_allocation = fresh.head_allocation;
  c.layer_allocation = fresh.layer_allocation;
  c.decode_budget = fresh.decode_budget;
  c.decode_interval = fresh.decode_interval;
  c.query_source = QuerySource::auto_select;
  const std::string expected = std::string("a policy (") + kPolicyNames + "), a codec (" +
                               codec_names() + ") or policy+codec";
  const size_t plus = m.name.find('+');
  if (plus == std::string::npos) {
    if (!apply_policy(m.name, c)) {
      c.policy = PolicyKind::full;
      if (!apply_codec(m.name, c)) throw_invalid("kv", "unknown method", m.name, expected);
    }
  } else {
    const std::string policy = m.name.substr(0, plus), codec = m.name.substr(plus + 1);
    if (!apply_policy(policy, c)) {
      throw_invalid("kv", "unknown policy in method '" + m.name + "'", policy, kPolicyNames);
    }
    if (!apply_codec(codec, c)) {
      throw_invalid("kv", "unknown codec in method '" + m.name + "'", codec, codec_names());
    }
  }
  if (c.policy == PolicyKind::snapkv && c.query_source == QuerySource::queries) {
    if (!knobs.window_given && knobs.window == fresh.window) c.window = kSnapkvWindow;
    if (!knobs.kernel_given && knobs.kernel == fresh.kernel) c.kernel = kSnapkvKernel;
  }
  m.uses_keep = c.policy != PolicyKind::full;
  if (m.uses_keep) {
    c.decode_budget = knobs.decode_budget;
    c.decode_interval = knobs.decode_interval;
  }
  return m;
}

std::vector<Method> parse_methods(std::string_view list, const CacheConfig& knobs) {
  std::vector<Method> out;
  std::set<std::string> seen;
  for (const std::string& item : split_list(list)) {
    if (item.empty()) throw_invalid("kv", "empty method name in list", std::string(list), "a,b,c");
    if (!seen.insert(item).second) throw_invalid("kv", "method listed twice", item, "unique names");
    out.push_back(parse_method(item, knobs));
  }
  if (out.empty()) throw_invalid("kv", "no methods given", "''", "at least one method");
  return out;
}

std::vector<double> parse_keeps(std::string_view list) {
  std::vector<double> out;
  for (const std::string& item : split_list(list)) {
    double v = 0.0;
    std::istringstream in(item);
    in >> v;
    if (item.empty() || !in.eof() || in.fail() || !(v > 0.0 && v <= 1.0)) {
      throw_invalid("kv", "bad kept fraction", "'" + item + "'", "a number in (0, 1]");
    }
    for (double prev : out) {
      if (prev == v) throw_invalid("kv", "kept fraction listed twice", item, "unique values");
    }
    out.push_back(v);
  }
  if (out.empty()) throw_invalid("kv", "no kept fractions given", "''", "e.g. 0.1,0.2,0.5");
  return out;
}

size_t budget_for(double keep, size_t compressed_tokens, const CacheConfig& config) {
  if (!(keep > 0.0 && keep <= 1.0)) {
    throw_invalid("kv", "kept fraction out of range", std::to_string(keep), "(0, 1]");
  }
  if (compressed_tokens == 0) throw_invalid("kv", "nothing to compress", "0 tokens", ">= 1");
  const auto wanted =
      static_cast<size_t>(std::ceil(keep * static_cast<double>(compressed_tokens) - 1e-9));
  const size_t floor = keeps_window(config) ? config.n_sink + config.window : config.n_sink + 1;
  return std::max(wanted, floor);
}

}  // namespace snapkv
