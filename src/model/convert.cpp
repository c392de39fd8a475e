// Raw export directory (config.json, tokenizer.json, tensors/*.npy) -> GGUF for llama.cpp.
#include "snapkv/model/convert.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "snapkv/model/tokenizer.h"
#include "snapkv/util/error.h"
#include "snapkv/util/mapped_file.h"
#include "snapkv/util/npy.h"

namespace snapkv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kComponent = "convert";

// llama.cpp's llama_ftype values for general.file_type.
constexpr uint32_t kFileTypeAllF32 = 0, kFileTypeMostlyF16 = 1, kFileTypeMostlyQ8_0 = 7;

json read_json(const fs::path& path) {
  require_regular_file(path.string(), kComponent, "a regular JSON file");
  std::ifstream in(path);
  if (!in) throw_runtime(kComponent, "cannot open " + path.string(), "unreadable", "a JSON file");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw_runtime(kComponent, path.string() + ": not valid JSON", e.what(), "a JSON object");
  }
}

const json& field(const json& obj, const std::string& file, const std::string& key) {
  if (!obj.is_object() || !obj.contains(key)) {
    throw_runtime(kComponent, file + ": field '" + key + "' missing", "absent", "present");
  }
  return obj.at(key);
}

uint64_t count_field(const json& obj, const std::string& file, const std::string& key,
                     uint64_t max) {
  const json& v = field(obj, file, key);
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<uint64_t>() > max) {
    throw_runtime(kComponent, file + ": field '" + key + "' out of range", v.dump(),
                  "an integer in 1.." + std::to_string(max));
  }
  return v.get<uint64_t>();
}

double float_field(const json& obj, const std::string& file, const std::string& key) {
  const json& v = field(obj, file, key);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0.0) {
    throw_runtime(kComponent, file + ": field '" + key + "' out of range", v.dump(),
                  "a finite number > 0");
  }
  return v.get<double>();
}

bool bool_field(const json& obj, const std::string& file, const std::string& key) {
  const json& v = field(obj, file, key);
  if (!v.is_boolean()) {
    throw_runtime(kComponent, file + ": field '" + key + "' not a boolean", v.dump(), "true/false");
  }
  return v.get<bool>();
}

int32_t id_field(const json& obj, const std::string& file, const std::string& key) {
  const json& v = field(obj, file, key);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
    throw_runtime(kComponent, file + ": field '" + key + "' not a token id", v.dump(),
                  "an integer >= 0");
  }
  return v.get<int32_t>();
}

std::string shape_str(const std::vector<size_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

gguf::Writer convert_export(const std::string& dir, gguf::TensorType type) {
  if (type != gguf::TensorType::f32 && type != gguf::TensorType::f16 &&
      type != gguf::TensorType::q8_0) {
    throw_invalid(kComponent, "output type not supported",
                  std::string(gguf::tensor_type_name(type)), "f32, f16 or q8_0");
  }
  const fs::path root(dir);
  if (!fs::is_directory(root)) {
    throw_runtime(kComponent, "export directory not found", dir, "a directory with config.json");
  }

  // ---- config.json ----
  const json cfg = read_json(root / "config.json");
  const std::string cf = "config.json";
  const json& arch = field(cfg, cf, "architecture");
  if (!arch.is_string() || arch.get<std::string>() != "llama") {
    throw_runtime(kComponent, cf + ": field 'architecture' not supported", arch.dump(),
                  "\"llama\"");
  }
  std::string name = "snapkv-model";
  if (cfg.contains("name")) {
    if (!cfg["name"].is_string()) {
      throw_runtime(kComponent, cf + ": field 'name' not a string", cfg["name"].dump(), "a string");
    }
    name = cfg["name"].get<std::string>();
  }
  const uint64_t n_ctx = count_field(cfg, cf, "context_length", uint64_t{1} << 24);
  const uint64_t n_embd = count_field(cfg, cf, "embedding_length", uint64_t{1} << 16);
  const uint64_t n_layers = count_field(cfg, cf, "block_count", 1024);
  const uint64_t n_ff = count_field(cfg, cf, "feed_forward_length", uint64_t{1} << 18);
  const uint64_t n_heads = count_field(cfg, cf, "head_count", 1024);
  const uint64_t n_kv = count_field(cfg, cf, "head_count_kv", 1024);
  const double freq_base = float_field(cfg, cf, "rope_freq_base");
  const double eps = float_field(cfg, cf, "rms_norm_eps");
  // Optional linear RoPE scaling (position interpolation): positions multiplied by 1/factor.
  const double rope_scale =
      cfg.contains("rope_scaling_factor") ? float_field(cfg, cf, "rope_scaling_factor") : 1.0;
  const uint64_t n_vocab = count_field(cfg, cf, "vocab_size", uint64_t{1} << 22);
  if (n_embd % n_heads != 0 || (n_embd / n_heads) % 2 != 0) {
    throw_runtime(kComponent, cf + ": embedding_length / head_count must be an even head_dim",
                  std::to_string(n_embd) + " / " + std::to_string(n_heads), "an even integer");
  }
  if (n_heads % n_kv != 0) {
    throw_runtime(kComponent, cf + ": head_count_kv must divide head_count", std::to_string(n_kv),
                  "a divisor of " + std::to_string(n_heads));
  }
  const uint64_t head_dim = n_embd / n_heads;

  // ---- tokenizer.json ----
  const json tok = read_json(root / "tokenizer.json");
  const std::string tf = "tokenizer.json";
  const json& model = field(tok, tf, "model");
  if (!model.is_string() || model.get<std::string>() != "llama") {
    throw_runtime(kComponent, tf + ": field 'model' not supported", model.dump(), "\"llama\"");
  }
  Vocab vocab;
  try {
    vocab.tokens = field(tok, tf, "tokens").get<std::vector<std::string>>();
    vocab.scores = field(tok, tf, "scores").get<std::vector<float>>();
    for (int32_t t : field(tok, tf, "token_types").get<std::vector<int32_t>>()) {
      vocab.types.push_back(static_cast<TokenType>(t));
    }
  } catch (const json::exception& e) {
    throw_runtime(kComponent, tf + ": tokens/scores/token_types of the wrong type", e.what(),
                  "arrays of strings, numbers and integers");
  }
  vocab.bos_id = id_field(tok, tf, "bos_id");
  vocab.eos_id = id_field(tok, tf, "eos_id");
  vocab.unk_id = id_field(tok, tf, "unk_id");
  vocab.add_bos = bool_field(tok, tf, "add_bos");
  vocab.add_space_prefix = bool_field(tok, tf, "add_space_prefix");
  try {
    vocab.validate();
  } catch (const std::invalid_argument& e) {
    throw_runtime(kComponent, tf + ": invalid vocabulary", e.what(), "a valid llama vocabulary");
  }
  if (vocab.tokens.size() != n_vocab) {
    throw_runtime(kComponent, tf + ": token count differs from config.json vocab_size",
                  std::to_string(vocab.tokens.size()), std::to_string(n_vocab));
  }

  // ---- metadata, in llama.cpp's converter order ----
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", name);
  w.set_alignment(gguf::kDefaultAlignment);
  w.set_u32("llama.context_length", static_cast<uint32_t>(n_ctx));
  w.set_u32("llama.embedding_length", static_cast<uint32_t>(n_embd));
  w.set_u32("llama.block_count", static_cast<uint32_t>(n_layers));
  w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(n_ff));
  w.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(head_dim));
  w.set_u32("llama.attention.head_count", static_cast<uint32_t>(n_heads));
  w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(n_kv));
  w.set_f32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(eps));
  w.set_f32("llama.rope.freq_base", static_cast<float>(freq_base));
  if (rope_scale != 1.0) {
    w.set_string("llama.rope.scaling.type", "linear");
    w.set_f32("llama.rope.scaling.factor", static_cast<float>(rope_scale));
  }
  w.set_u32("general.file_type", type == gguf::TensorType::f32   ? kFileTypeAllF32
                                 : type == gguf::TensorType::f16 ? kFileTypeMostlyF16
                                                                 : kFileTypeMostlyQ8_0);
  w.set_u32("llama.vocab_size", static_cast<uint32_t>(n_vocab));
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", vocab.tokens);
  w.set_f32_array("tokenizer.ggml.scores", vocab.scores);
  std::vector<int32_t> types;
  for (TokenType t : vocab.types) types.push_back(static_cast<int32_t>(t));
  w.set_i32_array("tokenizer.ggml.token_type", std::move(types));
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab.bos_id));
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab.eos_id));
  w.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(vocab.unk_id));
  w.set_bool("tokenizer.ggml.add_bos_token", vocab.add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
  w.set_bool("tokenizer.ggml.add_space_prefix", vocab.add_space_prefix);
  if (type == gguf::TensorType::q8_0) w.set_u32("general.quantization_version", 2);

  // ---- tensors: (name, numpy shape) ----
  const fs::path tdir = root / "tensors";
  std::set<std::string> expected_files;
  auto add = [&](const std::string& tname, std::vector<size_t> shape) {
    const fs::path path = tdir / (tname + ".npy");
    expected_files.insert(path.filename().string());
    if (!fs::exists(path)) {
      throw_runtime(kComponent, "tensor file tensors/" + tname + ".npy missing", "absent",
                    "numpy shape " + shape_str(shape));
    }
    NpyArray a = read_npy(path.string(), shape.size());
    if (a.shape != shape) {
      throw_runtime(kComponent, "tensor '" + tname + "' wrong numpy shape", shape_str(a.shape),
                    shape_str(shape));
    }
    for (float v : a.data) {
      if (!std::isfinite(v)) {
        throw_runtime(kComponent, "tensor '" + tname + "' holds a non-finite value",
                      std::to_string(v), "finite weights");
      }
    }
    std::vector<int64_t> ne(shape.rbegin(), shape.rend());  // ggml order
    gguf::TensorType t = gguf::TensorType::f32;
    if (shape.size() == 2) {
      t = type;
      if (t == gguf::TensorType::q8_0 && shape[1] % kQ8BlockSize != 0) t = gguf::TensorType::f16;
    }
    w.add_tensor_f32(tname, t, std::move(ne), a.data);
  };
  add("token_embd.weight", {n_vocab, n_embd});
  for (uint64_t l = 0; l < n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {n_embd});
    add(p + "attn_q.weight", {n_heads * head_dim, n_embd});
    add(p + "attn_k.weight", {n_kv * head_dim, n_embd});
    add(p + "attn_v.weight", {n_kv * head_dim, n_embd});
    add(p + "attn_output.weight", {n_embd, n_heads * head_dim});
    add(p + "ffn_norm.weight", {n_embd});
    add(p + "ffn_gate.weight", {n_ff, n_embd});
    add(p + "ffn_up.weight", {n_ff, n_embd});
    add(p + "ffn_down.weight", {n_embd, n_ff});
  }
  add("output_norm.weight", {n_embd});
  if (fs::exists(tdir / "output.weight.npy")) add("output.weight", {n_vocab, n_embd});
  for (const auto& entry : fs::directory_iterator(tdir)) {
    const std::string fname = entry.path().filename().string();
    if (expected_files.count(fname) == 0) {
      throw_runtime(kComponent, "unexpected file tensors/" + fname, "present",
                    "only llama tensors (llama.cpp refuses unknown tensors)");
    }
  }
  return w;
}

void convert_export_to_file(const std::string& dir, const std::string& out_path,
                            gguf::TensorType type) {
  convert_export(dir, type).write(out_path);
}

}  // namespace snapkv
