// `snapkv chat` and `snapkv run --chat` through the built binary, on the shipped tiny model with a
// chat template added (tests/model/chat_model_util.h) and without one (the named error).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../model/chat_model_util.h"
#include "cli_test_util.h"

namespace {

using nlohmann::json;
using snapkv::clitest::CliResult;
using snapkv::clitest::TempDir;

// run_cli with stdin from `input` (the test's text written to a file).
CliResult run_cli_input(const std::string& args, const std::string& input, const TempDir& dir) {
  const std::string in = dir.file("stdin.txt"), out = dir.file("stdout.txt"),
                    err = dir.file("stderr.txt");
  {
    std::ofstream f(in, std::ios::binary);
    f << input;
  }
  const std::string cmd = std::string("'") + SNAPKV_CLI_PATH + "' " + args + " <'" + in + "' >'" +
                          out + "' 2>'" + err + "'";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = snapkv::clitest::read_text(out);
  r.err = snapkv::clitest::read_text(err);
  return r;
}

std::string write_chat_model(const TempDir& dir) {
  const std::string path = dir.file("chat.gguf");
  const std::vector<uint8_t> bytes =
      snapkv::testing::tiny_model_with_template(snapkv::testing::kMistralTemplate);
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<json> json_lines(const std::string& out) {
  std::vector<json> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(json::parse(line));
  }
  return lines;
}

const std::string kShipped = std::string(SNAPKV_SOURCE_DIR) + "/models/snapkv-tiny4.gguf";

TEST(ChatCli, ModelWithoutTemplateIsANamedError) {
  TempDir dir("chat_cli");
  CliResult r = run_cli_input("chat --model '" + kShipped + "' --quiet", "hello\n", dir);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("no tokenizer.chat_template"), std::string::npos) << r.err;
  r = run_cli_input("run --model '" + kShipped + "' --chat --prompt hello --quiet", "", dir);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("no tokenizer.chat_template"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("drop --chat"), std::string::npos) << r.err;
  // Without --chat the same model runs.
  r = run_cli_input("run --model '" + kShipped + "' --prompt hello --max-tokens 2 --quiet", "",
                    dir);
  EXPECT_EQ(r.rc, 0) << r.err;
  r = run_cli_input("run --model '" + kShipped + "' --system hi --prompt hello --quiet", "", dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--system without --chat"), std::string::npos) << r.err;
}

// --no-chat: the same model chats with each turn as a plain line; the turns share one cache
// (the second turn feeds only its own line, not the whole history again).
TEST(ChatCli, NoChatSendsPlainLines) {
  TempDir dir("chat_cli");
  CliResult r = run_cli_input("chat --model '" + kShipped +
                                  "' --no-chat --quiet --max-tokens 3 "
                                  "--budget 64 --json",
                              "The secret is 42.\nWhat is the secret?\n", dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<json> turns = json_lines(r.out);
  ASSERT_EQ(turns.size(), 2u) << r.out;
  EXPECT_TRUE(turns[1].at("canonical").get<bool>()) << turns[1].dump();
  const size_t fed1 = turns[0].at("prompt_tokens").get<size_t>();
  const size_t fed2 = turns[1].at("prompt_tokens").get<size_t>();
  const size_t gen1 = turns[0].at("tokens").size(), gen2 = turns[1].at("tokens").size();
  ASSERT_EQ(turns[0].at("finish_reason"), "length");
  ASSERT_EQ(turns[1].at("finish_reason"), "length");
  EXPECT_GT(fed1, 1u);
  EXPECT_LT(fed2, fed1 + gen1) << "the second turn re-fed the history: " << r.out;
  // Each reply's last token waits to be fed with the next turn (fed2 counts it).
  EXPECT_EQ(turns[1].at("n_past").get<size_t>(), fed1 + gen1 - 1 + fed2 + gen2 - 1) << r.out;
}

TEST(ChatCli, MultiTurnJsonWithinBudgetAndEofEndsCleanly) {
  TempDir dir("chat_cli");
  const std::string model = write_chat_model(dir);
  const std::string args = "chat --model '" + model +
                           "' --system 'Be brief.' --budget 48 --window 8 --kernel 5 "
                           "--decode-interval 4 --max-tokens 5 --json --quiet --threads 1";
  const std::string input =
      "The pass key is 71432. Remember it, and tell me when I ask for it later.\n"
      "  \n"
      "What is the capital of France? Answer with one word, please.\n"
      "What was the pass key that I gave you at the start?\n";
  const CliResult r = run_cli_input(args, input, dir);  // ends at EOF
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<json> turns = json_lines(r.out);
  ASSERT_EQ(turns.size(), 3u) << r.out;  // the blank line is skipped
  size_t n_past = 0;
  for (size_t i = 0; i < turns.size(); ++i) {
    const json& t = turns[i];
    EXPECT_EQ(t["turn"], i + 1);
    EXPECT_LE(t["kept_rows"]["max"].get<size_t>(), 48u) << t.dump();
    EXPECT_EQ(t["budget"], 48);
    EXPECT_EQ(t["decode_budget"], 48);  // the budget, as --decode-budget was not given
    EXPECT_LE(t["tokens"].size(), 5u);
    EXPECT_GT(t["n_past"].get<size_t>(), n_past);
    n_past = t["n_past"].get<size_t>();
    EXPECT_GT(t["kv_bytes"].get<size_t>(), 0u);
    EXPECT_LT(t["kv_bytes"].get<size_t>(), t["kv_bytes_full_fp16"].get<size_t>());
  }
  EXPECT_GT(n_past, 48u);  // the conversation passed the budget

  // /exit ends early with exit 0; the same first turn gives the same reply (greedy).
  const CliResult r2 =
      run_cli_input(args, input.substr(0, input.find('\n') + 1) + "/exit\nnever\n", dir);
  ASSERT_EQ(r2.rc, 0) << r2.err;
  const std::vector<json> turns2 = json_lines(r2.out);
  ASSERT_EQ(turns2.size(), 1u) << r2.out;
  EXPECT_EQ(turns2[0]["text"], turns[0]["text"]);
}

TEST(ChatCli, TextModeAndRunChat) {
  TempDir dir("chat_cli");
  const std::string model = write_chat_model(dir);
  const CliResult r = run_cli_input("chat --model '" + model + "' --max-tokens 3 --threads 1",
                                    "hello there\n", dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("[chat] turn 1:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mistral template"), std::string::npos) << r.err;
  // run --chat: the rendered prompt is "<s>[INST] hello there [/INST]" (BOS parsed, not added
  // twice): more prompt tokens than the raw text, and exactly one BOS.
  const std::string run = "run --model '" + model +
                          "' --prompt 'hello there' --max-tokens 2 "
                          "--quiet --threads 1 --json";
  const CliResult raw = run_cli_input(run, "", dir);
  const CliResult chat = run_cli_input(run + " --chat", "", dir);
  ASSERT_EQ(raw.rc, 0) << raw.err;
  ASSERT_EQ(chat.rc, 0) << chat.err;
  const json jr = json::parse(raw.out), jc = json::parse(chat.out);
  EXPECT_GT(jc["prompt_tokens"].get<size_t>(), jr["prompt_tokens"].get<size_t>());
  const CliResult ids =
      run_cli_input("tokenize --model '" + model +
                        "' --parse-special --no-bos --text '<s>[INST] hello there [/INST]'",
                    "", dir);
  ASSERT_EQ(ids.rc, 0) << ids.err;
  const json expected = json::parse(ids.out);
  EXPECT_EQ(jc["prompt_tokens"].get<size_t>(), expected.size()) << ids.out;
}

// A conversation's length is unknown: --keep F keeps F x the context (--ctx-size here).
TEST(ChatCli, KeepSizesTheBudgetFromTheContext) {
  TempDir dir("chat_cli");
  const std::string model = write_chat_model(dir);
  const CliResult r = run_cli_input("chat --model '" + model +
                                        "' --keep 0.5 --ctx-size 200 --max-tokens 2 --json "
                                        "--quiet --threads 1",
                                    "hi\n", dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<json> turns = json_lines(r.out);
  ASSERT_EQ(turns.size(), 1u) << r.out;
  EXPECT_EQ(turns[0]["budget"], 100);
  const CliResult big = run_cli_input(
      "chat --model '" + model + "' --ctx-size 1000000 --quiet --threads 1", "hi\n", dir);
  EXPECT_EQ(big.rc, 2) << big.err;
  EXPECT_NE(big.err.find("--ctx-size larger than the model's trained context"), std::string::npos)
      << big.err;
}

// The chat's commands through a pipe: /help and /stats print on stderr, /clear starts over (the
// first turn after it replies as the first turn did), an unknown command is an error and never
// reaches the model, and "//x" sends "/x".
TEST(ChatCli, SlashCommandsThroughAPipe) {
  TempDir dir("chat_cli");
  const std::string model = write_chat_model(dir);
  const std::string args =
      "chat --model '" + model + "' --max-tokens 4 --budget 48 --window 8 --json --threads 1";
  const CliResult r = run_cli_input(args,
                                    "/help\nhello there\n/stats\n/clear\nhello there\n/bogus "
                                    "x\n//slash\n/exit\nnever\n",
                                    dir);
  EXPECT_EQ(r.rc, 1) << r.err;  // the unknown command
  const std::vector<json> turns = json_lines(r.out);
  ASSERT_EQ(turns.size(), 3u) << r.out;  // hello, hello (after /clear), /slash
  EXPECT_EQ(turns[0]["turn"], 1);
  EXPECT_EQ(turns[1]["turn"], 1);  // a new conversation
  EXPECT_EQ(turns[1]["text"], turns[0]["text"]);
  EXPECT_EQ(turns[1]["n_past"], turns[0]["n_past"]);
  EXPECT_EQ(turns[2]["turn"], 2);
  EXPECT_NE(r.err.find("/clear"), std::string::npos) << r.err;  // the /help list
  EXPECT_NE(r.err.find("[chat] stats:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[chat] unknown command '/bogus'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("new conversation"), std::string::npos) << r.err;
}

// /save writes the conversation as a .kvc; after /clear, /load goes on with it: the same question
// gets the same reply (greedy) as it did right after the save, in the same process and in a new
// one. Bad paths are named errors and the chat goes on (exit 1 at the end).
TEST(ChatCli, SaveAndLoadThroughAPipe) {
  TempDir dir("chat_cli");
  const std::string model = write_chat_model(dir);
  const std::string saved = dir.file("conv.kvc");
  const std::string args = "chat --model '" + model +
                           "' --max-tokens 6 --budget 48 --window 8 --decode-interval 4 --json "
                           "--threads 1";
  const std::string first = "The pass key is 71432. Remember it.\n";
  const std::string question = "What is the pass key?\n";
  CliResult r = run_cli_input(
      args, first + "/save " + saved + "\n" + question + "/clear\n/load " + saved + "\n" + question,
      dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<json> turns = json_lines(r.out);
  ASSERT_EQ(turns.size(), 3u) << r.out;
  EXPECT_EQ(turns[1]["turn"], 2);
  EXPECT_EQ(turns[2]["turn"], 2);  // the loaded conversation had one turn
  EXPECT_EQ(turns[2]["tokens"], turns[1]["tokens"]) << r.out;
  EXPECT_EQ(turns[2]["text"], turns[1]["text"]);
  EXPECT_EQ(turns[2]["n_past"], turns[1]["n_past"]);
  EXPECT_EQ(turns[2]["kv_bytes"], turns[1]["kv_bytes"]);
  EXPECT_NE(r.err.find("[chat] saved"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[chat] loaded"), std::string::npos) << r.err;

  // A new process: the same reply from the file alone.
  CliResult again = run_cli_input(args, "/load " + saved + "\n" + question, dir);
  ASSERT_EQ(again.rc, 0) << again.err;
  const std::vector<json> turns2 = json_lines(again.out);
  ASSERT_EQ(turns2.size(), 1u) << again.out;
  EXPECT_EQ(turns2[0]["tokens"], turns[1]["tokens"]);

  // Bad paths: each a named error, and the chat goes on.
  const std::string sub = dir.file("sub");
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string bad = "/save " + dir.file("early.kvc") + "\nhello there\n/save\n/save " +
                          model + "\n/save " + sub + "\n/save " + fifo + "\n/save " +
                          dir.file("missing/x.kvc") + "\n/load " + dir.file("absent.kvc") +
                          "\n/load " + model + "\n/load\nhello again\n";
  r = run_cli_input(args, bad, dir);
  EXPECT_EQ(r.rc, 1) << r.err;
  turns = json_lines(r.out);
  EXPECT_EQ(turns.size(), 2u) << r.out;  // both turns answered around the failures
  for (const char* expected :
       {"nothing to save", "/save needs a file", "names the same file as --model", "directory",
        "FIFO", "absent.kvc", "not a .kvc file", "/load needs a file"}) {
    EXPECT_NE(r.err.find(expected), std::string::npos) << expected << "\n" << r.err;
  }
  std::ifstream model_file(model, std::ios::binary);
  char magic[4] = {};
  model_file.read(magic, 4);
  EXPECT_EQ(std::string(magic, 4), "GGUF");  // the model was not replaced
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_NE(::stat(dir.file("early.kvc").c_str(), &st), 0);  // nothing was written

  // A file of another model (another template: another fingerprint) is refused by name; the
  // first .kvc of a compress run holds no conversation.
  const std::string other = dir.file("chatml.gguf");
  {
    const std::vector<uint8_t> bytes =
        snapkv::testing::tiny_model_with_template(snapkv::testing::kChatmlTemplate);
    std::ofstream f(other, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  }
  r = run_cli_input("chat --model '" + other + "' --json --max-tokens 2 --threads 1",
                    "/load " + saved + "\nhi\n", dir);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(json_lines(r.out).size(), 1u) << r.out;
  EXPECT_NE(r.err.find("written for another model"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(other), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(saved), std::string::npos) << r.err;
  const std::string doc = dir.file("doc.kvc");
  const CliResult c =
      run_cli_input("compress --model '" + model + "' --prompt-file - --out '" + doc + "' --quiet",
                    "some document text, long enough to compress\n", dir);
  ASSERT_EQ(c.rc, 0) << c.err;
  r = run_cli_input(args, "/load " + doc + "\n", dir);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("holds no conversation"), std::string::npos) << r.err;
}

}  // namespace
