// Reports: SHA-256 against the FIPS 180-4 test vectors, the summary table, the plot files, the
// progress bar's duration format. Scoring itself is covered by scoring_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "snapkv/eval/progress.h"
#include "snapkv/eval/report.h"
#include "snapkv/util/error.h"

namespace snapkv::eval {
namespace {

std::string sha(const std::string& s) {
  return sha256_hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

TEST(Report, Sha256TestVectors) {
  EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // 55, 56 and 64 bytes: the padding boundary cases.
  EXPECT_NE(sha(std::string(55, 'x')), sha(std::string(56, 'x')));
  const std::filesystem::path p = std::filesystem::temp_directory_path() / "snapkv_sha_test.bin";
  {
    std::FILE* f = std::fopen(p.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("abc", f);
    std::fclose(f);
  }
  EXPECT_EQ(sha256_file(p.string()), sha("abc"));
  std::filesystem::remove(p);
  EXPECT_THROW(sha256_file("/nonexistent/model.gguf"), RuntimeError);
}

// A hand-made result: 2 tasks x (full, snapkv) x keeps {0.1, 0.5}.
EvalResults fake_results() {
  EvalResults r;
  r.options.tasks = {Task::niah_single, Task::vt};
  r.options.n = 2;
  r.options.context = 128;
  r.options.methods = parse_methods("full,snapkv", r.options.defaults);
  r.options.keeps = {0.1, 0.5};
  r.seconds = 1.5;
  for (Task t : r.options.tasks) {
    for (const Method& m : r.options.methods) {
      for (double keep : r.options.keeps) {
        CellResult c;
        c.task = std::string(task_name(t));
        c.method = m.name;
        c.keep = keep;
        c.keep_independent = !m.uses_keep;
        c.n = 2;
        c.accuracy = m.uses_keep ? 100.0 * keep : 90.0;
        c.mean_kv_bytes = m.uses_keep ? 1000.0 * keep : 1000.0;
        c.mean_kv_bytes_full_fp16 = 1000.0;
        c.kv_fraction = c.mean_kv_bytes / 1000.0;
        c.mean_kept_rows = m.uses_keep ? 128 * keep : 128;
        c.prefill_seconds = 1.0;
        c.prompt_tokens_total = 256;
        c.decode_seconds = 0.5;
        c.decode_steps_total = 10;
        r.cells.push_back(c);
      }
    }
  }
  return r;
}

TEST(Report, SummaryAveragesOverTasks) {
  const EvalResults r = fake_results();
  const std::vector<CellResult> s = summarize_over_tasks(r);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].method, "full");
  EXPECT_DOUBLE_EQ(s[0].accuracy, 90.0);
  EXPECT_EQ(s[0].n, 4u);
  EXPECT_EQ(s[2].method, "snapkv");
  EXPECT_DOUBLE_EQ(s[2].accuracy, 10.0);
  EXPECT_DOUBLE_EQ(s[3].kv_fraction, 0.5);
  EXPECT_DOUBLE_EQ(s[3].prefill_tok_s, 256.0);
  EXPECT_DOUBLE_EQ(s[3].decode_tok_s, 20.0);
}

TEST(Report, TablePrintsKeepIndependentMethodsOnce) {
  const std::string table = format_table(fake_results());
  EXPECT_NE(table.find("niah_single"), std::string::npos);
  EXPECT_NE(table.find("vt"), std::string::npos);
  size_t full_rows = 0, snap_rows = 0;
  size_t pos = 0;
  while ((pos = table.find('\n', pos)) != std::string::npos) {
    ++pos;
    if (table.compare(pos, 5, "full ") == 0) ++full_rows;
    if (table.compare(pos, 7, "snapkv ") == 0) ++snap_rows;
  }
  EXPECT_EQ(full_rows, 1u);
  EXPECT_EQ(snap_rows, 2u);
}

TEST(Report, PlotsWriteTwoPngs) {
  try {
    find_gnuplot();
  } catch (const RuntimeError&) {
    GTEST_SKIP() << "gnuplot not installed";
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "snapkv_plot_test";
  std::filesystem::create_directories(dir);
  const std::string png = (dir / "acc.png").string();
  EXPECT_EQ(second_plot_path(png), (dir / "acc_bytes.png").string());
  plot_results(fake_results(), png);
  for (const std::string& p : {png, second_plot_path(png)}) {
    ASSERT_TRUE(std::filesystem::exists(p)) << p;
    std::FILE* f = std::fopen(p.c_str(), "rb");
    unsigned char magic[8] = {};
    ASSERT_EQ(std::fread(magic, 1, 8, f), 8u);
    std::fclose(f);
    EXPECT_EQ(magic[1], 'P');
    EXPECT_EQ(magic[2], 'N');
    EXPECT_EQ(magic[3], 'G');
  }
  std::filesystem::remove_all(dir);
}

TEST(Report, DurationFormat) {
  EXPECT_EQ(ProgressBar::format_duration(12.4), "12s");
  EXPECT_EQ(ProgressBar::format_duration(187.0), "3m07s");
  EXPECT_EQ(ProgressBar::format_duration(3720.0), "1h02m");
  EXPECT_EQ(ProgressBar::format_duration(-1.0), "?");
}

}  // namespace
}  // namespace snapkv::eval
