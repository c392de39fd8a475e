// `snapkv convert`: the project's raw model export (training output) -> a GGUF file llama.cpp
// loads.
//
//   snapkv convert --in training/runs/tiny/export --out models/tiny.gguf --type q8_0
//
// The export format is documented in include/snapkv/model/convert.h and in --help.
#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "snapkv/gguf/gguf.h"
#include "snapkv/model/convert.h"
#include "snapkv/model/llama.h"
#include "snapkv/util/error.h"
#include "snapkv/util/timer.h"

namespace {

struct ConvertOptions {
  std::string in;
  std::string out;
  std::string type = "f16";
  bool quiet = false;
};

int run_convert(const ConvertOptions& o) {
  using namespace snapkv;
  gguf::TensorType type = gguf::TensorType::f16;
  if (o.type == "f32") {
    type = gguf::TensorType::f32;
  } else if (o.type == "f16") {
    type = gguf::TensorType::f16;
  } else if (o.type == "q8_0") {
    type = gguf::TensorType::q8_0;
  } else {
    throw_invalid("convert", "--type not supported", o.type, "f32, f16 or q8_0");
  }
  Timer timer;
  const gguf::Writer writer = convert_export(o.in, type);
  writer.write(o.out);
  // Read the file back through the engine's loader: what was written must load.
  const LlamaModel model = LlamaModel::load(o.out);
  const LlamaConfig& c = model.config();
  std::printf(
      "wrote %s: %zu tensors, %.2f MiB of weights (%s), %zu layers, %zu embd, %zu/%zu heads, "
      "vocab %zu, ctx %zu%s\n",
      o.out.c_str(), model.file().tensors().size(),
      static_cast<double>(model.weight_bytes()) / (1024.0 * 1024.0), o.type.c_str(), c.n_layers,
      c.n_embd, c.n_heads, c.n_kv_heads, c.n_vocab, c.n_ctx,
      model.weights().tied_output ? ", tied output" : "");
  if (!o.quiet) std::fprintf(stderr, "[convert] done in %.2f s\n", timer.seconds());
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "convert", "Convert a raw model export (config.json, tokenizer.json, tensors/*.npy) to GGUF",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto o = std::make_shared<ConvertOptions>();
      sub.footer(
          "Example:\n  snapkv convert --in runs/tiny/export --out tiny.gguf --type q8_0\n\n"
          "Export directory DIR:\n"
          "  DIR/config.json    {\"architecture\": \"llama\", \"name\", \"context_length\",\n"
          "                      \"embedding_length\", \"block_count\", \"feed_forward_length\",\n"
          "                      \"head_count\", \"head_count_kv\", \"rope_freq_base\",\n"
          "                      \"rms_norm_eps\", \"vocab_size\"}\n"
          "  DIR/tokenizer.json {\"model\": \"llama\", \"tokens\", \"scores\", \"token_types\"\n"
          "                      (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,\n"
          "                      6 byte), \"bos_id\", \"eos_id\", \"unk_id\", \"add_bos\",\n"
          "                      \"add_space_prefix\"}\n"
          "  DIR/tensors/<gguf name>.npy  float32, shape = torch Linear [out][in]:\n"
          "      token_embd.weight [n_vocab][n_embd], output_norm.weight [n_embd],\n"
          "      output.weight [n_vocab][n_embd] (optional; tied to token_embd when absent),\n"
          "      blk.N.attn_norm.weight / ffn_norm.weight [n_embd],\n"
          "      blk.N.attn_q.weight [n_head*hd][n_embd], attn_k/attn_v [n_kv*hd][n_embd],\n"
          "      attn_output [n_embd][n_head*hd], ffn_gate/ffn_up [n_ff][n_embd],\n"
          "      ffn_down [n_embd][n_ff].\n"
          "  RoPE must already use llama.cpp's adjacent-pair (NORM) convention.\n"
          "Matrices are stored as --type (q8_0 falls back to f16 for rows not a multiple of 32);\n"
          "norms stay f32. The output loads in llama.cpp (same keys and tensor names).");
      sub.add_option("--in", o->in, "Raw export directory")->required();
      sub.add_option("--out", o->out, "Output GGUF path")->required();
      sub.add_option("--type", o->type, "f32|f16|q8_0 for the weight matrices")
          ->capture_default_str();
      sub.add_flag("--quiet", o->quiet, "No log lines on stderr");
      return [o] { return run_convert(*o); };
    }};

}  // namespace
