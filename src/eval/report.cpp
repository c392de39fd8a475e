// JSON records and summary tables of `snapkv eval` (eval/report.h).
#include <cstdio>
#include <sstream>
#include <string>

#include "snapkv/eval/report.h"
#include "snapkv/kv/core/spec_json.h"

namespace snapkv::eval {
namespace {

using nlohmann::json;

// Each method's name and whether it uses keep, beside its configuration's record.
json methods_json(const std::vector<Method>& methods) {
  json out = json::array();
  for (const Method& m : methods) {
    json j = config_record_json(m.config);
    j["name"] = m.name;
    j["uses_keep"] = m.uses_keep;
    out.push_back(std::move(j));
  }
  return out;
}

json info_json(const RunInfo& info) {
  return {{"git", {{"commit", info.git_commit}, {"dirty", info.git_dirty}}},
          {"machine",
           {{"nproc", info.nproc}, {"cpu_model", info.cpu_model}, {"threads", info.threads}}},
          {"date", info.date},
          {"command", info.command}};
}

json cell_json(const CellResult& c, bool with_samples) {
  json j = {{"task", c.task},
            {"method", c.method},
            {"keep", c.keep},
            {"keep_independent", c.keep_independent},
            {"n", c.n},
            {"accuracy", c.accuracy},
            {"mean_prompt_tokens", c.mean_prompt_tokens},
            {"mean_budget", c.mean_budget},
            {"mean_kept_rows", c.mean_kept_rows},
            {"mean_kv_bytes", c.mean_kv_bytes},
            {"mean_kv_bytes_full_fp16", c.mean_kv_bytes_full_fp16},
            {"kv_fraction", c.kv_fraction},
            {"mean_kv_bytes_prompt", c.mean_kv_bytes_prompt},
            {"mean_kv_bytes_full_fp16_prompt", c.mean_kv_bytes_full_fp16_prompt},
            {"kv_fraction_prompt", c.kv_fraction_prompt},
            {"prefill_tokens_per_s", c.prefill_tok_s},
            {"decode_tokens_per_s", c.decode_tok_s},
            {"prefill_s", c.prefill_seconds},
            {"decode_s", c.decode_seconds},
            {"mean_generated_tokens", c.mean_generated},
            {"agreement_with_full", c.has_full ? json(c.agreement_with_full) : json(nullptr)}};
  if (with_samples) {
    json samples = json::array();
    for (const SampleRecord& s : c.samples) {
      samples.push_back({{"index", s.index},
                         {"score", s.score},
                         {"prediction", s.prediction},
                         {"answers", s.answers},
                         {"prompt_tokens", s.prompt_tokens},
                         {"budget", s.budget},
                         {"mean_kept_rows", s.kept_rows},
                         {"generated_tokens", s.generated_tokens}});
    }
    j["samples"] = samples;
  }
  return j;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string pad(const std::string& s, size_t width, bool left = true) {
  if (s.size() >= width) return s + " ";
  const std::string fill(width - s.size(), ' ');
  return (left ? s + fill : fill + s) + " ";
}

std::string keep_label(double keep, bool independent) {
  return independent ? "-" : fixed(keep, keep * 100 == static_cast<int>(keep * 100) ? 2 : 3);
}

std::string kib(double bytes) {
  return fixed(bytes / 1024.0, 1);
}

}  // namespace

json model_json(const LlamaModel& model, const RunInfo& info) {
  const LlamaConfig& c = model.config();
  return {{"path", info.model_path},
          {"bytes", info.model_bytes},
          {"sha256", info.model_sha256},
          {"name", c.name},
          {"arch", c.arch_name()},
          {"n_ctx", c.n_ctx},
          {"n_embd", c.n_embd},
          {"n_layers", c.n_layers},
          {"n_ff", c.n_ff},
          {"n_heads", c.n_heads},
          {"n_kv_heads", c.n_kv_heads},
          {"head_dim", c.head_dim},
          {"n_vocab", c.n_vocab},
          {"weight_bytes", model.weight_bytes()}};
}

json to_json(const EvalResults& results, const LlamaModel& model, const RunInfo& info) {
  const EvalOptions& o = results.options;
  json tasks = json::array();
  for (Task t : o.tasks) tasks.push_back(std::string(task_name(t)));
  json j = {{"schema", "snapkv-eval/1"},
            {"mode", "tasks"},
            {"model", model_json(model, info)},
            {"config",
             {{"tasks", tasks},
              {"context", o.context},
              {"n", o.n},
              {"methods", methods_json(o.methods)},
              {"keeps", o.keeps},
              {"protocol", std::string(to_string(o.protocol))},
              {"seed", o.seed},
              {"no_needle_control", o.remove_needles},
              {"share_prefill", o.share_prefill},
              {"prefill_chunk", o.prefill_chunk},
              {"answer_slack", o.answer_slack},
              {"method_defaults", config_record_json(o.defaults)},
              {"budget_rule",
               "max(ceil(keep * compressed tokens), n_sink + window if keep_window else n_sink + "
               "1); compressed tokens = whole prompt (query_aware) or context (question_agnostic); "
               "policy-full methods ignore keep"},
              {"scoring", "RULER string_match_all x 100, greedy decoding"}}},
            {"seconds", results.seconds}};
  j.update(info_json(info));
  json cells = json::array();
  for (const CellResult& c : results.cells) cells.push_back(cell_json(c, true));
  j["results"] = cells;
  json summary = json::array();
  for (const CellResult& c : summarize_over_tasks(results)) summary.push_back(cell_json(c, false));
  j["summary"] = summary;
  return j;
}

json to_json(const PerplexityResults& results, const LlamaModel& model, const RunInfo& info) {
  const PerplexityOptions& o = results.options;
  json j = {{"schema", "snapkv-eval/1"},
            {"mode", "perplexity"},
            {"model", model_json(model, info)},
            {"config",
             {{"prefix", o.prefix},
              {"continuation", o.continuation},
              {"n_windows", o.n_windows},
              {"methods", methods_json(o.methods)},
              {"keeps", o.keeps},
              {"share_prefill", o.share_prefill},
              {"prefill_chunk", o.prefill_chunk},
              {"text_source", o.text_source},
              {"stream_tokens", results.stream_tokens},
              {"method_defaults", config_record_json(o.defaults)},
              {"budget_rule",
               "max(ceil(keep * prefix), n_sink + window if keep_window else "
               "n_sink + 1); policy-full methods ignore keep"}}},
            {"seconds", results.seconds}};
  j.update(info_json(info));
  json cells = json::array();
  for (const PerplexityCell& c : results.cells) {
    cells.push_back({{"method", c.method},
                     {"keep", c.keep},
                     {"keep_independent", c.keep_independent},
                     {"n_windows", c.n_windows},
                     {"n_scored_tokens", c.n_scored},
                     {"mean_nll", c.mean_nll},
                     {"perplexity", c.perplexity},
                     {"delta_nll_vs_full", c.has_full ? json(c.delta_nll) : json(nullptr)},
                     {"window_nll", c.window_nll},
                     {"mean_budget", c.mean_budget},
                     {"mean_kept_rows", c.mean_kept_rows},
                     {"mean_kv_bytes", c.mean_kv_bytes},
                     {"mean_kv_bytes_full_fp16", c.mean_kv_bytes_full_fp16},
                     {"kv_fraction", c.kv_fraction},
                     {"kv_fraction_prefix", c.kv_fraction_prefix},
                     {"prefill_tokens_per_s", c.prefill_tok_s}});
  }
  j["results"] = cells;
  return j;
}

std::string format_table(const EvalResults& results) {
  const EvalOptions& o = results.options;
  std::ostringstream out;
  out << "context " << o.context << " tokens, " << o.n << " samples per task, protocol "
      << to_string(o.protocol) << (o.remove_needles ? ", CONTROL: needles removed" : "") << ", "
      << fixed(results.seconds, 1) << " s\n";
  out << "accuracy = RULER string_match_all x 100; =full% = answers identical to the full "
         "cache's; kept = rows per KV head after the prompt; KV% = bytes vs a full fp16 cache at "
         "the end of the run\n";
  const size_t w_method = 16;
  out << pad("method", w_method) << pad("keep", 6);
  for (Task t : o.tasks)
    out << pad(std::string(task_name(t)), std::max<size_t>(8, task_name(t).size()), false);
  out << pad("mean", 7, false) << pad("=full%", 7, false) << pad("kept", 8, false)
      << pad("KV%", 7, false) << pad("KV KiB", 9, false) << pad("prefill t/s", 12, false)
      << pad("decode t/s", 11, false) << "\n";
  const std::vector<CellResult> summary = summarize_over_tasks(results);
  for (const CellResult& s : summary) {
    if (s.keep_independent && s.keep != o.keeps.front()) continue;
    out << pad(s.method, w_method) << pad(keep_label(s.keep, s.keep_independent), 6);
    for (Task t : o.tasks) {
      const std::string name(task_name(t));
      for (const CellResult& c : results.cells) {
        if (c.task == name && c.method == s.method && c.keep == s.keep) {
          out << pad(fixed(c.accuracy, 1), std::max<size_t>(8, name.size()), false);
        }
      }
    }
    out << pad(fixed(s.accuracy, 1), 7, false)
        << pad(s.has_full ? fixed(s.agreement_with_full, 1) : "-", 7, false)
        << pad(fixed(s.mean_kept_rows, 1), 8, false)
        << pad(fixed(100.0 * s.kv_fraction, 1), 7, false) << pad(kib(s.mean_kv_bytes), 9, false)
        << pad(fixed(s.prefill_tok_s, 0), 12, false) << pad(fixed(s.decode_tok_s, 1), 11, false)
        << "\n";
  }
  return out.str();
}

std::string format_table(const PerplexityResults& results) {
  const PerplexityOptions& o = results.options;
  std::ostringstream out;
  out << "perplexity of " << o.continuation << " tokens after a " << o.prefix
      << "-token compressed prefix, " << o.n_windows << " windows of " << o.text_source << ", "
      << fixed(results.seconds, 1) << " s\n";
  out << pad("method", 16) << pad("keep", 6) << pad("NLL", 8, false) << pad("ppl", 9, false)
      << pad("dNLL", 8, false) << pad("kept", 8, false) << pad("KV%", 7, false)
      << pad("prefill t/s", 12, false) << "\n";
  for (const PerplexityCell& c : results.cells) {
    if (c.keep_independent && c.keep != o.keeps.front()) continue;
    out << pad(c.method, 16) << pad(keep_label(c.keep, c.keep_independent), 6)
        << pad(fixed(c.mean_nll, 4), 8, false) << pad(fixed(c.perplexity, 3), 9, false)
        << pad(c.has_full ? fixed(c.delta_nll, 4) : "-", 8, false)
        << pad(fixed(c.mean_kept_rows, 1), 8, false)
        << pad(fixed(100.0 * c.kv_fraction, 1), 7, false)
        << pad(fixed(c.prefill_tok_s, 0), 12, false) << "\n";
  }
  return out.str();
}

}  // namespace snapkv::eval
