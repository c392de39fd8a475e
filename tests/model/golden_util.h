// Shared fixtures of the model tests: the golden tiny Llama of tools/golden_llama.py (its raw
// export and float64 reference logits in tests/model/data/golden/), converted in-process to GGUF.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "snapkv/gguf/gguf.h"
#include "snapkv/model/convert.h"
#include "snapkv/model/llama.h"
#include "snapkv/util/npy.h"

namespace snapkv::test {

inline std::string golden_dir() {
  return std::string(SNAPKV_SOURCE_DIR) + "/tests/model/data/golden";
}

struct Golden {
  std::vector<int32_t> prompt, greedy;
  std::vector<float> logits, logits_tied, logits_w16, logits_q8;  // [T][V]
  std::vector<float> logits_stream;                               // [n_greedy][V]
  double max_abs_logit = 0, max_diff_kv16 = 0, max_diff_w16 = 0, max_diff_q8 = 0;
  double max_diff_stream_kv16 = 0;
  size_t stream_sinks = 0, stream_budget = 0;
};

inline const Golden& golden() {
  static const Golden g = [] {
    Golden r;
    std::ifstream in(golden_dir() + "/reference.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    r.prompt = j.at("prompt").get<std::vector<int32_t>>();
    r.greedy = j.at("greedy").get<std::vector<int32_t>>();
    r.max_abs_logit = j.at("max_abs_logit").get<double>();
    r.max_diff_kv16 = j.at("max_diff_kv16").get<double>();
    r.max_diff_w16 = j.at("max_diff_w16").get<double>();
    r.max_diff_q8 = j.at("max_diff_q8").get<double>();
    r.max_diff_stream_kv16 = j.at("max_diff_stream_kv16").get<double>();
    r.stream_sinks = j.at("stream_sinks").get<size_t>();
    r.stream_budget = j.at("stream_budget").get<size_t>();
    r.logits = read_npy(golden_dir() + "/logits.npy", 2).data;
    r.logits_tied = read_npy(golden_dir() + "/logits_tied.npy", 2).data;
    r.logits_w16 = read_npy(golden_dir() + "/logits_w16.npy", 2).data;
    r.logits_q8 = read_npy(golden_dir() + "/logits_q8.npy", 2).data;
    r.logits_stream = read_npy(golden_dir() + "/logits_stream.npy", 2).data;
    return r;
  }();
  return g;
}

// The golden export converted to `type`, parsed from memory.
inline LlamaModel load_model(gguf::TensorType type) {
  return LlamaModel(gguf::File::from_bytes(convert_export(golden_dir(), type).to_bytes()));
}

// A fresh temporary copy of the golden export directory (the caller may edit and remove it).
inline std::filesystem::path temp_export_copy(const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("snapkv_golden_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(golden_dir(), dir, fs::copy_options::recursive);
  return dir;
}

}  // namespace snapkv::test
