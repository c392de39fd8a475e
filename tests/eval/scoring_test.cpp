// RULER string_match_all / string_match_part on hand-made predictions.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "snapkv/eval/scoring.h"

namespace snapkv::eval {
namespace {

TEST(Scoring, StringMatchAllIsTheFractionFound) {
  const std::vector<std::string> four = {"1234567", "7654321", "1111111", "2222222"};
  EXPECT_DOUBLE_EQ(string_match_all(" 1234567, 7654321, 1111111 and 2222222.", four), 1.0);
  EXPECT_DOUBLE_EQ(string_match_all(" 1234567 and 1111111", four), 0.5);
  EXPECT_DOUBLE_EQ(string_match_all(" 7654321", four), 0.25);
  EXPECT_DOUBLE_EQ(string_match_all("nothing here", four), 0.0);
  EXPECT_DOUBLE_EQ(string_match_all("", four), 0.0);
}

TEST(Scoring, CaseInsensitiveSubstring) {
  EXPECT_DOUBLE_EQ(string_match_all("they are: gujtb, XGLNZ", {"GUJTB", "xglnz"}), 1.0);
  EXPECT_DOUBLE_EQ(string_match_all("123456", {"1234567"}), 0.0);     // a prefix is not enough
  EXPECT_DOUBLE_EQ(string_match_all("x12345678", {"1234567"}), 1.0);  // substring, as RULER
}

TEST(Scoring, StringMatchPart) {
  EXPECT_DOUBLE_EQ(string_match_part("only 7654321", {"1234567", "7654321"}), 1.0);
  EXPECT_DOUBLE_EQ(string_match_part("none", {"1234567", "7654321"}), 0.0);
}

TEST(Scoring, TaskScoreIsMeanTimes100) {
  const std::vector<std::string> preds = {" 1234567.", " 999", " 11 and 22"};
  const std::vector<std::vector<std::string>> answers = {{"1234567"}, {"1234567"}, {"11", "33"}};
  EXPECT_DOUBLE_EQ(score_string_match_all(preds, answers), 100.0 * (1.0 + 0.0 + 0.5) / 3.0);
}

TEST(Scoring, RejectsBadInput) {
  EXPECT_THROW(string_match_all("x", {}), std::invalid_argument);
  EXPECT_THROW(string_match_part("x", {}), std::invalid_argument);
  EXPECT_THROW(score_string_match_all({"a"}, {}), std::invalid_argument);
  EXPECT_THROW(score_string_match_all({}, {}), std::invalid_argument);
}

}  // namespace
}  // namespace snapkv::eval
