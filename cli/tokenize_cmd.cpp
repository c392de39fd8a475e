// `snapkv tokenize`: the token ids of a text under a GGUF model's tokenizer, printed as one line
// `[id, id, ...]` like llama.cpp's `llama-tokenize --ids`.
//
//   snapkv tokenize --model M.gguf --text "Hello world" [--no-bos] [--parse-special]
//   snapkv tokenize --model M.gguf --file prompt.txt
//
// BOS (and EOS, when the vocabulary asks for it) is added when tokenizer.ggml.add_bos_token is set
// and --no-bos is not given, as llama-tokenize does. Special-token texts ("<|eot_id|>") become
// those tokens only with --parse-special. Not here: the tokenizers (model/tokenizer.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cache_options.h"
#include "command.h"
#include "snapkv/gguf/gguf.h"
#include "snapkv/model/tokenizer.h"
#include "snapkv/util/error.h"

namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string file;
  bool text_given = false;
  bool no_bos = false;
  bool parse_special = false;
};

constexpr size_t kMaxTextBytes = size_t{64} << 20;

int run_tokenize(const TokenizeOptions& o) {
  using namespace snapkv;
  if (o.text_given == !o.file.empty()) {
    throw_invalid("tokenize", "text source", o.text_given ? "both" : "none",
                  "exactly one of --text or --file");
  }
  std::string text = o.text;
  if (!o.file.empty()) {
    text = snapkv::cli::read_any_text_file("tokenize", o.file, kMaxTextBytes);
  }
  const gguf::File file = gguf::File::open(o.model);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file);
  const bool add_special = tokenizer.vocab().add_bos && !o.no_bos;
  const std::vector<TokenId> ids = tokenizer.encode(text, add_special, o.parse_special);
  std::string line = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ", ";
    line += std::to_string(ids[i]);
  }
  line += "]\n";
  std::fputs(line.c_str(), stdout);
  return 0;
}

snapkv::cli::RegisterCommand reg{
    "tokenize", "Print the token ids of a text as [id, id, ...] (like llama-tokenize --ids)",
    [](CLI::App& sub) -> snapkv::cli::Action {
      auto opts = std::make_shared<TokenizeOptions>();
      sub.add_option("--model,-m", opts->model, "GGUF file whose tokenizer is used")->required();
      sub.add_option("--text", opts->text, "the text to tokenize")
          ->each([opts](const std::string&) { opts->text_given = true; });
      sub.add_option("--file", opts->file, "read the text from this file (bytes as they are)");
      sub.add_flag("--no-bos", opts->no_bos, "do not add BOS (or EOS) even if the model asks");
      sub.add_flag("--parse-special", opts->parse_special,
                   "turn special-token texts such as <|eot_id|> into those tokens");
      sub.footer(
          "Example:\n  snapkv tokenize --model llama3.gguf --text 'Hello world'\n"
          "  [128000, 9906, 1917]");
      return [opts] { return run_tokenize(*opts); };
    }};

}  // namespace
