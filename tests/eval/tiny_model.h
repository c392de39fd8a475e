// The eval tests' model: the golden tiny Llama of tests/model (2 layers, 4 heads, 2 KV heads,
// head_dim 16, vocab 300 with a byte-fallback SPM tokenizer) with its context_length raised to
// 1024 so that task prompts fit. Its weights are random-like (a seeded torch init), so answers are
// wrong but every code path of the harness runs on a real forward pass. Written once per test
// binary to a temporary GGUF file (the harness records the file's size and sha256).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "model/golden_util.h"
#include "snapkv/model/convert.h"
#include "snapkv/model/llama.h"
#include "snapkv/model/tokenizer.h"

namespace snapkv::test {

// Removes the temporary GGUF when the test binary exits.
struct TempFile {
  std::string path;
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

inline const std::string& tiny_model_path() {
  static const TempFile file{[] {
    namespace fs = std::filesystem;
    const fs::path dir = temp_export_copy("eval");
    nlohmann::json config;
    {
      std::ifstream in(dir / "config.json");
      config = nlohmann::json::parse(in);
    }
    config["context_length"] = 1024;
    {
      std::ofstream out(dir / "config.json");
      out << config.dump(1);
    }
    const fs::path gguf =
        fs::temp_directory_path() / ("snapkv_eval_tiny_" + std::to_string(::getpid()) + ".gguf");
    convert_export_to_file(dir.string(), gguf.string(), gguf::TensorType::f32);
    fs::remove_all(dir);
    return gguf.string();
  }()};
  return file.path;
}

struct TinyModel {
  LlamaModel model;
  Tokenizer tokenizer;
};

inline const TinyModel& tiny_model() {
  static const TinyModel m = [] {
    LlamaModel model = LlamaModel::load(tiny_model_path());
    Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
    return TinyModel{std::move(model), std::move(tokenizer)};
  }();
  return m;
}

}  // namespace snapkv::test
