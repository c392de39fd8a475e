// gnuplot PNGs of `snapkv eval` (eval/report.h). The data and the script are written to a
// temporary directory and gnuplot is run as a program; its failure is a RuntimeError. The image it
// draws there is written to the --plot path through util/output_file.h.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "snapkv/eval/report.h"
#include "snapkv/util/error.h"
#include "snapkv/util/output_file.h"

namespace snapkv::eval {
namespace {

namespace fs = std::filesystem;

// One curve: (x, y) points of one method.
struct Series {
  std::string title;
  std::vector<std::pair<double, double>> points;
};

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Writes `series` as gnuplot data blocks and draws them into `png`.
void draw(const std::vector<Series>& series, const std::string& png, const std::string& title,
          const std::string& xlabel, const std::string& ylabel, bool lines, bool logx) {
  const std::string gnuplot = find_gnuplot();
  const fs::path dir =
      fs::temp_directory_path() / ("snapkv_plot_" + std::to_string(::getpid()) + "_" +
                                   std::to_string(std::hash<std::string>{}(png)));
  fs::create_directories(dir);
  // gnuplot draws into the temporary directory; the PNG then goes to `png` through util's one
  // writer (a temporary file renamed over a regular file, written through to a device or FIFO).
  const fs::path data = dir / "data.txt", script = dir / "plot.gp", drawn = dir / "plot.png";
  {
    std::ofstream out(data);
    for (const Series& s : series) {
      for (const auto& [x, y] : s.points) out << x << ' ' << y << '\n';
      out << "\n\n";
    }
  }
  {
    std::ofstream out(script);
    out << "set terminal pngcairo size 960,640 font 'sans,11'\n"
        << "set output " << quote(drawn.string()) << "\n"
        << "set title " << quote(title) << " noenhanced\n"
        << "set xlabel " << quote(xlabel) << " noenhanced\n"
        << "set ylabel " << quote(ylabel) << " noenhanced\n"
        << "set key outside right top noenhanced\n"
        << "set grid\n";
    if (logx) out << "set logscale x\n";
    out << "plot ";
    for (size_t i = 0; i < series.size(); ++i) {
      if (i > 0) out << ", \\\n     ";
      out << quote(data.string()) << " index " << i << " using 1:2 with "
          << (lines ? "linespoints" : "points") << " pt " << (i % 13) + 1 << " ps 1.3 lw 2 title "
          << quote(series[i].title);
    }
    out << "\n";
  }
  const std::string command = shell_quote(gnuplot) + " " + shell_quote(script.string()) + " 2>&1";
  const int rc = std::system(command.c_str());
  std::string bytes;
  if (rc == 0) {
    std::ifstream in(drawn, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (rc != 0 || bytes.empty()) {
    throw_runtime("plot", "gnuplot failed drawing " + png,
                  rc != 0 ? "exit status " + std::to_string(rc) : "no image", "0");
  }
  OutputFile out = OutputFile::open(png, "plot", "--plot file");
  out.write(bytes);
  out.commit();
}

}  // namespace

std::string second_plot_path(const std::string& png_path) {
  const fs::path p(png_path);
  return (p.parent_path() / (p.stem().string() + "_bytes" + p.extension().string())).string();
}

std::string find_gnuplot() {
  const char* path = std::getenv("PATH");
  std::string list = path != nullptr ? path : "/usr/bin:/bin";
  std::istringstream in(list);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    if (dir.empty()) continue;
    const fs::path candidate = fs::path(dir) / "gnuplot";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  throw_runtime("plot", "gnuplot not found on PATH", list,
                "the gnuplot binary (Debian: apt-get install gnuplot-nox)");
}

void plot_results(const EvalResults& results, const std::string& png_path) {
  const EvalOptions& o = results.options;
  const std::vector<CellResult> summary = summarize_over_tasks(results);
  std::vector<Series> by_keep, by_bytes;
  for (const Method& m : o.methods) {
    Series a{m.name, {}}, b{m.name, {}};
    for (const CellResult& c : summary) {
      if (c.method != m.name) continue;
      a.points.emplace_back(c.keep, c.accuracy);
      if (!c.keep_independent || b.points.empty()) {
        b.points.emplace_back(100.0 * c.kv_fraction, c.accuracy);
      }
    }
    by_keep.push_back(std::move(a));
    by_bytes.push_back(std::move(b));
  }
  std::string tasks;
  for (Task t : o.tasks) {
    if (!tasks.empty()) tasks += ',';
    tasks += task_name(t);
  }
  const std::string subtitle = "context " + std::to_string(o.context) + ", " +
                               std::string(to_string(o.protocol)) + ", n=" + std::to_string(o.n) +
                               "/task (" + tasks + ")";
  draw(by_keep, png_path, "Accuracy vs kept fraction: " + subtitle, "kept fraction of the prompt",
       "accuracy (mean over tasks, RULER string_match_all x100)", true, false);
  draw(by_bytes, second_plot_path(png_path), "Accuracy vs KV memory: " + subtitle,
       "KV bytes, % of a full fp16 cache", "accuracy (mean over tasks)", true, true);
}

void plot_results(const PerplexityResults& results, const std::string& png_path) {
  const PerplexityOptions& o = results.options;
  std::vector<Series> by_keep, by_bytes;
  for (const Method& m : o.methods) {
    Series a{m.name, {}}, b{m.name, {}};
    for (const PerplexityCell& c : results.cells) {
      if (c.method != m.name) continue;
      a.points.emplace_back(c.keep, c.perplexity);
      if (!c.keep_independent || b.points.empty()) {
        b.points.emplace_back(100.0 * c.kv_fraction, c.perplexity);
      }
    }
    by_keep.push_back(std::move(a));
    by_bytes.push_back(std::move(b));
  }
  const std::string subtitle = "prefix " + std::to_string(o.prefix) + ", next " +
                               std::to_string(o.continuation) + " tokens, " +
                               std::to_string(o.n_windows) + " windows";
  draw(by_keep, png_path, "Perplexity vs kept fraction: " + subtitle, "kept fraction of the prefix",
       "perplexity of the continuation", true, false);
  draw(by_bytes, second_plot_path(png_path), "Perplexity vs KV memory: " + subtitle,
       "KV bytes, % of a full fp16 cache", "perplexity of the continuation", true, true);
}

}  // namespace snapkv::eval
