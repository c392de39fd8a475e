// RULER string_match_all / string_match_part (see scoring.h).
#include "snapkv/eval/scoring.h"

#include <string>

#include "snapkv/util/error.h"

namespace snapkv::eval {

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

void require_answers(const std::vector<std::string>& answers) {
  if (answers.empty()) throw_invalid("scoring", "no reference answers", "0", ">= 1");
}

}  // namespace

double string_match_all(std::string_view prediction, const std::vector<std::string>& answers) {
  require_answers(answers);
  const std::string pred = lower(prediction);
  size_t found = 0;
  for (const auto& answer : answers) {
    if (pred.find(lower(answer)) != std::string::npos) ++found;
  }
  return double(found) / double(answers.size());
}

double string_match_part(std::string_view prediction, const std::vector<std::string>& answers) {
  require_answers(answers);
  const std::string pred = lower(prediction);
  for (const auto& answer : answers) {
    if (pred.find(lower(answer)) != std::string::npos) return 1.0;
  }
  return 0.0;
}

double score_string_match_all(const std::vector<std::string>& predictions,
                              const std::vector<std::vector<std::string>>& answers) {
  if (predictions.size() != answers.size()) {
    throw_invalid("scoring", "predictions and answers differ in count",
                  std::to_string(predictions.size()), std::to_string(answers.size()));
  }
  if (predictions.empty()) throw_invalid("scoring", "no samples", "0", ">= 1");
  double sum = 0.0;
  for (size_t i = 0; i < predictions.size(); ++i)
    sum += string_match_all(predictions[i], answers[i]);
  return 100.0 * sum / double(predictions.size());
}

}  // namespace snapkv::eval
