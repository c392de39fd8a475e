// Cross-check helper (not part of the build): tokenizes many strings with llama.cpp's libllama in
// one process, for comparison with snapkv's BPE fixtures. Input: one hex-encoded string per line;
// output: per line "<plain ids> | <parse_special ids>" (no BOS/EOS; add_special = false).
//
//   g++ -std=c++17 -O1 tools/llama_tokenize_batch.cpp -I/work/llama.cpp/include \
//       -I/work/llama.cpp/ggml/include -L/work/llama.cpp/build/bin -lllama \
//       -Wl,-rpath,/work/llama.cpp/build/bin -o /tmp/llama_tokenize_batch
//   /tmp/llama_tokenize_batch vocab.gguf < strings.hex > ids.txt
#include <llama.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

static std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& text,
                                         bool parse_special) {
  std::vector<llama_token> ids(text.size() + 8);
  int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                         static_cast<int32_t>(ids.size()), false, parse_special);
  if (n < 0) {
    ids.resize(static_cast<size_t>(-n));
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                       static_cast<int32_t>(ids.size()), false, parse_special);
  }
  ids.resize(static_cast<size_t>(n < 0 ? 0 : n));
  return ids;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s vocab.gguf < hex-lines\n", argv[0]);
    return 2;
  }
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_model_params params = llama_model_default_params();
  params.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], params);
  if (model == nullptr) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::string text;
    for (size_t i = 0; i + 1 < line.size(); i += 2) {
      text += static_cast<char>(std::stoi(line.substr(i, 2), nullptr, 16));
    }
    for (bool special : {false, true}) {
      try {
        for (llama_token id : tokenize(vocab, text, special)) std::printf("%d ", id);
      } catch (const std::exception& e) {
        std::printf("EXCEPTION(%s) ", e.what());
      }
      std::printf(special ? "\n" : "| ");
    }
    std::fflush(stdout);
  }
  llama_model_free(model);
  return 0;
}
