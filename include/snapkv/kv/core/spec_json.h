// The cache spec (kv/core/spec.h) in JSON: a configuration record as one JSON object, and a JSON
// value as an option value. Header-only, for the front ends that speak JSON (the CLI's --json
// output, the server's request fields, eval's reports); the kv library itself does not link
// nlohmann::json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "snapkv/kv/core/spec.h"
#include "snapkv/util/error.h"

namespace snapkv {

inline nlohmann::json option_value_json(const OptionValue& v) {
  if (const bool* b = std::get_if<bool>(&v)) return *b;
  if (const uint64_t* n = std::get_if<uint64_t>(&v)) return *n;
  if (const double* d = std::get_if<double>(&v)) return *d;
  return std::get<std::string>(v);
}

// Every option of `config` by canonical name (resolved codec defaults, as config_record).
inline nlohmann::json config_record_json(const CacheConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : config_record(config))
    j[std::string(name)] = option_value_json(value);
  return j;
}

// A JSON scalar as an option value (typed: a string for a choice, a number for a count or real,
// a boolean for a flag); the option's own check (check_option_value) runs when it is set.
// Throws std::invalid_argument naming the option for arrays, objects and null.
inline OptionValue option_value_from_json(std::string_view option, const nlohmann::json& j) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  throw_invalid("kv", "option '" + std::string(option) + "' must be a JSON scalar",
                std::string(j.type_name()), "a string, number or boolean");
}

}  // namespace snapkv
