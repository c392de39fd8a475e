// The codec-name grammar (kv/core/codec_spec.h): parse a name into its parts, print parts back.
#include "snapkv/kv/core/codec_spec.h"

#include <array>
#include <tuple>
#include <utility>

#include "snapkv/util/error.h"

namespace snapkv {
namespace {

constexpr std::string_view kGrammar =
    "fp16|kitty|kivimix|gear|zipcache[r]|kivi<K>[<V>][r|rk|rv|rkv] (K, V: code bits 1..8)";

// The families named by a word alone; zipcache and kivi take more parts.
constexpr std::array<std::pair<std::string_view, CodecFamily>, 4> kPlainFamilies{{
    {"fp16", CodecFamily::fp16},
    {"kitty", CodecFamily::kitty},
    {"kivimix", CodecFamily::kivimix},
    {"gear", CodecFamily::gear},
}};
constexpr std::string_view kKivi = "kivi", kZipcache = "zipcache";

[[noreturn]] void malformed(std::string_view name) {
  std::string got(1, '\'');  // appended: GCC 12 misfires -Wrestrict on "'" + string
  got += name;
  got += '\'';
  std::string expected(kGrammar);
  expected += "; built: ";
  expected += built_codec_names();
  throw_invalid("kv", "unknown codec", got, expected);
}

// The rotation "r" stands for: both roles for one width, the values for two widths and zipcache.
std::pair<bool, bool> family_rotation(const CodecSpec& s) {
  const bool both = s.family == CodecFamily::kivi && s.key_bits == s.value_bits;
  return {both, true};
}

// Reads the rotation suffix into s; false when `rest` is not one.
bool parse_rotation(std::string_view rest, CodecSpec& s) {
  if (rest.empty()) return true;
  if (rest == "r") {
    std::tie(s.rotate_keys, s.rotate_values) = family_rotation(s);
  } else if (rest == "rk") {
    s.rotate_keys = true;
  } else if (rest == "rv") {
    s.rotate_values = true;
  } else if (rest == "rkv") {
    s.rotate_keys = s.rotate_values = true;
  } else {
    return false;
  }
  return true;
}

bool is_bits(char c) {
  return c >= '1' && c <= '8';
}

std::string rotation_suffix(const CodecSpec& s) {
  if (!s.rotated()) return "";
  if (std::pair(s.rotate_keys, s.rotate_values) == family_rotation(s)) return "r";
  if (s.rotate_keys && s.rotate_values) return "rkv";
  return s.rotate_keys ? "rk" : "rv";
}

std::string bits_text(int bits) {
  return bits == 0 ? std::string("fp16/parameter") : std::to_string(bits) + "-bit";
}

}  // namespace

std::string_view codec_grammar() {
  return kGrammar;
}

CodecSpec parse_codec_spec(std::string_view name) {
  CodecSpec s;
  for (const auto& [word, family] : kPlainFamilies) {
    if (name == word) {
      s.family = family;
      if (family == CodecFamily::kitty || family == CodecFamily::kivimix) {
        s.key_bits = s.value_bits = 2;
      }
      return s;
    }
  }
  std::string_view rest = name;
  if (rest.starts_with(kZipcache)) {
    s.family = CodecFamily::zipcache;
    rest.remove_prefix(kZipcache.size());
  } else if (rest.starts_with(kKivi) && rest.size() > kKivi.size() && is_bits(rest[kKivi.size()])) {
    s.family = CodecFamily::kivi;
    rest.remove_prefix(kKivi.size());
    s.key_bits = s.value_bits = rest[0] - '0';
    rest.remove_prefix(1);
    if (!rest.empty() && is_bits(rest[0])) {
      s.value_bits = rest[0] - '0';
      rest.remove_prefix(1);
    }
  } else {
    malformed(name);
  }
  if (!parse_rotation(rest, s)) malformed(name);
  return s;
}

std::string codec_name(const CodecSpec& s) {
  const auto bits_ok = [](int b) { return b >= 1 && b <= 8; };
  switch (s.family) {
    case CodecFamily::kivi:
      if (bits_ok(s.key_bits) && bits_ok(s.value_bits)) {
        std::string out(kKivi);
        out += static_cast<char>('0' + s.key_bits);
        if (s.value_bits != s.key_bits) out += static_cast<char>('0' + s.value_bits);
        return out + rotation_suffix(s);
      }
      break;
    case CodecFamily::zipcache:
      if (s.key_bits == 0 && s.value_bits == 0) return std::string(kZipcache) + rotation_suffix(s);
      break;
    default:
      for (const auto& [word, family] : kPlainFamilies) {
        if (family == s.family && !s.rotated() && s == parse_codec_spec(word)) {
          return std::string(word);
        }
      }
      break;
  }
  throw_invalid("kv", "codec spec has no name", describe(s), kGrammar);
}

std::string describe(const CodecSpec& s) {
  std::string out;
  switch (s.family) {
    case CodecFamily::fp16:
      out = "fp16";
      break;
    case CodecFamily::kivi:
      out = "KIVI";
      break;
    case CodecFamily::kitty:
      out = "kitty";
      break;
    case CodecFamily::kivimix:
      out = "kivimix";
      break;
    case CodecFamily::zipcache:
      out = "zipcache";
      break;
    case CodecFamily::gear:
      out = "gear";
      break;
  }
  if (s.key_bits != 0 || s.value_bits != 0) {
    out += ", " + bits_text(s.key_bits) + " keys, " + bits_text(s.value_bits) + " values";
  }
  if (s.rotate_keys && s.rotate_values) {
    out += ", keys and values rotated";
  } else if (s.rotated()) {
    out += s.rotate_keys ? ", keys rotated" : ", values rotated";
  }
  return out;
}

}  // namespace snapkv
