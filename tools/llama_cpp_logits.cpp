// A tiny logits dumper against llama.cpp's public C API (llama.h), for fixture generation only:
// it is compiled by hand by tools/llama_cpp_logits.py, never by the project's CMake, and links a
// llama.cpp build that lives outside the repository.
//
//   llama_cpp_logits MODEL.gguf OUT.f32 N_GREEDY TOKEN [TOKEN ...]
//
// Runs the prompt (the given token ids, as one batch, every position's logits requested) with an
// F32 K/V cache and no flash attention, then N_GREEDY greedy decode steps (argmax, ties to the
// lower id). Writes to OUT.f32 the raw little-endian float32 logits [T + N_GREEDY][n_vocab]: row t
// is the prediction after token t of prompt + greedy continuation. Prints the greedy ids and
// n_vocab as one JSON line on stdout. Exit 1 with a message on any failure.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "llama_cpp_logits: %s\n", what.c_str());
  return 1;
}

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

// Decodes tokens at positions pos0.. as one batch; logits requested for every token.
bool decode_all(llama_context* ctx, const std::vector<llama_token>& tokens, int pos0) {
  llama_batch batch = llama_batch_init(static_cast<int32_t>(tokens.size()), 0, 1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.token[i] = tokens[i];
    batch.pos[i] = pos0 + static_cast<int>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = static_cast<int32_t>(tokens.size());
  const int rc = llama_decode(ctx, batch);
  llama_batch_free(batch);
  return rc == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return fail("usage: llama_cpp_logits MODEL.gguf OUT.f32 N_GREEDY TOKEN...");
  const std::string model_path = argv[1], out_path = argv[2];
  const int n_greedy = std::atoi(argv[3]);
  std::vector<llama_token> prompt;
  for (int i = 4; i < argc; ++i) prompt.push_back(static_cast<llama_token>(std::atoi(argv[i])));

  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  llama_model_params mparams = llama_model_default_params();
  mparams.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mparams);
  if (model == nullptr) return fail("cannot load " + model_path);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  llama_context_params cparams = llama_context_default_params();
  const auto n_total = static_cast<uint32_t>(prompt.size() + static_cast<size_t>(n_greedy));
  cparams.n_ctx = n_total + 16;
  cparams.n_batch = n_total + 16;
  cparams.n_ubatch = n_total + 16;
  cparams.type_k = GGML_TYPE_F32;
  cparams.type_v = GGML_TYPE_F32;
  cparams.flash_attn = false;
  cparams.n_threads = 1;
  cparams.n_threads_batch = 1;
  llama_context* ctx = llama_init_from_model(model, cparams);
  if (ctx == nullptr) return fail("cannot create a context");

  std::vector<float> rows;
  if (!decode_all(ctx, prompt, 0)) return fail("llama_decode failed on the prompt");
  for (size_t i = 0; i < prompt.size(); ++i) {
    const float* l = llama_get_logits_ith(ctx, static_cast<int32_t>(i));
    rows.insert(rows.end(), l, l + n_vocab);
  }
  std::vector<llama_token> greedy;
  for (int s = 0; s < n_greedy; ++s) {
    const float* last = rows.data() + rows.size() - static_cast<size_t>(n_vocab);
    llama_token best = 0;
    for (int v = 1; v < n_vocab; ++v) {
      if (last[v] > last[best]) best = v;
    }
    greedy.push_back(best);
    if (!decode_all(ctx, {best}, static_cast<int>(prompt.size()) + s)) {
      return fail("llama_decode failed on a decode step");
    }
    const float* l = llama_get_logits_ith(ctx, 0);
    rows.insert(rows.end(), l, l + n_vocab);
  }

  FILE* out = std::fopen(out_path.c_str(), "wb");
  if (out == nullptr) return fail("cannot write " + out_path);
  const size_t written = std::fwrite(rows.data(), sizeof(float), rows.size(), out);
  std::fclose(out);
  if (written != rows.size()) return fail("short write to " + out_path);

  std::printf("{\"n_vocab\": %d, \"greedy\": [", n_vocab);
  for (size_t i = 0; i < greedy.size(); ++i) std::printf(i ? ", %d" : "%d", greedy[i]);
  std::printf("]}\n");
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
