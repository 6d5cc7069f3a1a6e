// experiments/runner/report: the Markdown table (mean ± 95% half-width over seeds), paired differences,
// declared expectations and their verdicts, and the SVG plots of a
// sweep directory, from run directories written here by hand.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "experiments/runner/report.hpp"
#include "experiments/runner/store.hpp"
#include "helpers.hpp"
#include "tensor/io.hpp"

using namespace attnlab;
using namespace attnlab::runner;
namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void fake_run(const fs::path& dir, int id, const std::string& attention, int heads, int seed, double acc) {
  const fs::path d = dir / fmt::format("runs/{:04d}", id);
  fs::create_directories(d);
  write_text_atomic((d / "point.json").string(),
                    fmt::format(R"x({{"model.attention": "{}", "model.heads": {}, "seed": {}}})x", attention, heads, seed));
  write_text_atomic((d / "config.toml").string(),
                    fmt::format("seed = {}\n[model]\nattention = \"{}\"\nheads = {}\n", seed, attention, heads));
  std::string lines;
  for (int step = 1; step <= 3; ++step)
    lines += fmt::format("{{\"step\": {}, \"time\": {}, \"train_loss\": {}}}\n", step * 10, step, 3.0 - step * acc);
  write_text_atomic((d / "metrics.jsonl").string(), lines);
  write_text_atomic((d / "summary.json").string(),
                    fmt::format(R"x({{"experiment": "x", "status": "complete", "steps": 30, "seconds": {},
                                    "peak_rss_mb": {}, "metrics": {{"val_acc": {}}}}})x",
                                attention == "mha" ? 3.0 : 1.5, 100 * heads, acc));
}

// The sweep file of the fake runs: two attentions x two head counts x three seeds.
const std::string kSweepHead = R"x(experiment = "x"
seeds = [0, 1, 2]
[grid]
"model.attention" = ["mha", "local(window=4)"]
"model.heads" = [2, 4]
)x";

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("attnlab_{}_{}", name, getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("report: mean ± 95% half-width over seeds per configuration, sorted, with valid SVG plots") {
  const fs::path dir = fresh_dir("report");
  write_text_atomic((dir / "sweep.toml").string(), kSweepHead + R"x([report]
metric = "val_acc"
x = "model.heads"
curves = ["train_loss"]
bubble = { x = "steps_per_s", y = "val_acc", size = "peak_rss_mb", label = "model.attention" }
)x");
  // Expansion order: attention, heads, seed. mha/2 scores 0.5, 0.6, 0.7; local/4 scores 0.8 x3.
  const double acc[4][3] = {{0.5, 0.6, 0.7}, {0.55, 0.55, 0.55}, {0.2, 0.3, 0.4}, {0.8, 0.8, 0.8}};
  int id = 0;
  for (int a = 0; a < 2; ++a)
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 3; ++s, ++id)
        if (id != 8) fake_run(dir, id, a == 0 ? "mha" : "local(window=4)", 2 << h, s, acc[a * 2 + h][s]);
  // Run 8 (local, 2 heads, seed 2) failed: in the store, not on disk.
  Store(dir / "results.sqlite").put_failed(8, R"x({"model.attention": "local(window=4)", "model.heads": 2, "seed": 2})x",
                                           "exit status 1");
  std::ostringstream log;
  const fs::path report = write_report(dir, log);
  CHECK(report == dir / "report.md");
  const std::string md = read(report);
  CHECK(md.find("12 runs planned, 11 complete") != std::string::npos);
  CHECK(md.find("| model.attention | model.heads | n | val_acc |") != std::string::npos);
  // Sorted by val_acc, highest first; half-width t_{0.975, n-1} * sd / sqrt(n): 4.303 * 0.1 / sqrt(3)
  // and 12.706 * 0.0707 / sqrt(2).
  const size_t best = md.find("| `local(window=4)` | `4` | 3 | 0.8 ± 0 |");
  const size_t second = md.find("| `mha` | `2` | 3 | 0.6 ± 0.25 |");
  const size_t third = md.find("| `mha` | `4` | 3 | 0.55 ± 0 |");
  const size_t last = md.find("| `local(window=4)` | `2` | 2 | 0.25 ± 0.64 |");
  CHECK(best != std::string::npos);
  CHECK(second != std::string::npos);
  CHECK(third != std::string::npos);
  CHECK(last != std::string::npos);
  CHECK((best < second && second < third && third < last));
  CHECK(md.find("runs/0008") != std::string::npos);  // listed under failed runs
  for (const char* plot : {"plots/curve_train_loss.svg", "plots/val_acc_vs_model_heads.svg", "plots/bubble.svg"}) {
    CAPTURE(plot);
    CHECK(md.find(std::string("](") + plot + ")") != std::string::npos);
    const std::string svg = read(dir / plot);
    CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
    CHECK(svg.find("</svg>") == svg.size() - 7);
  }
  const std::string bubble = read(dir / "plots/bubble.svg");
  CHECK(bubble.find(">mha<") != std::string::npos);
  CHECK(bubble.find(">local(window=4)<") != std::string::npos);
  // results.csv: a header and one line per stored run (11 complete, 1 failed).
  const std::string csv = read(dir / "results.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 13);
  CHECK(csv.rfind("id,status,model.attention,model.heads,seed,", 0) == 0);
  // Reporting again changes nothing: the runs are already stored.
  write_report(dir, log);
  CHECK(read(report) == md);
  fs::remove_all(dir);
}

TEST_CASE("report: a directory without sweep.toml, and an unknown headline metric, are errors") {
  const fs::path dir = fresh_dir("report_bad");
  std::ostringstream log;
  CHECK_THROWS_WITH_AS(write_report(dir, log), doctest::Contains("not a sweep directory (no sweep.toml)"), FileError);
  write_text_atomic((dir / "sweep.toml").string(), "experiment = \"x\"\n[report]\nmetric = \"bleu\"\n");
  fake_run(dir, 0, "mha", 2, 0, 0.5);
  CHECK_THROWS_WITH_AS(write_report(dir, log), doctest::Contains("report.metric 'bleu' is not a metric of any run"),
                       ValueError);
  fs::remove_all(dir);
}

TEST_CASE("report: paired differences against the baseline and a verdict per declared expectation") {
  const fs::path dir = fresh_dir("report_expect");
  write_text_atomic((dir / "sweep.toml").string(), kSweepHead + R"x([report]
metric = "val_acc"
baseline = { "model.attention" = "mha", "model.heads" = 2 }
[[report.expect]]
name = "local/4 beats mha/2"
a = { "model.attention" = "local(window=4)", "model.heads" = 4 }
b = { "model.attention" = "mha", "model.heads" = 2 }
relation = "better"
[[report.expect]]
name = "mha/2 beats local/4"
a = { "model.attention" = "mha", "model.heads" = 2 }
b = { "model.attention" = "local(window=4)", "model.heads" = 4 }
relation = "better"
[[report.expect]]
name = "mha/4 equals mha/2"
a = { "model.attention" = "mha", "model.heads" = 4 }
b = { "model.attention" = "mha", "model.heads" = 2 }
relation = "equal"
margin = 0.01
[[report.expect]]
name = "local/4 above 0.75"
a = { "model.attention" = "local(window=4)", "model.heads" = 4 }
relation = "above"
value = 0.75
)x");
  // Per seed: mha/2 0.5, 0.6, 0.7; mha/4 0.55, 0.65, 0.75 (+0.05 on every seed: the pairs resolve it
  // although the two configurations' own intervals overlap); local/2 0.1 x3; local/4 0.8, 0.9, 0.85.
  const double acc[4][3] = {{0.5, 0.6, 0.7}, {0.55, 0.65, 0.75}, {0.1, 0.1, 0.1}, {0.8, 0.9, 0.85}};
  int id = 0;
  for (int a = 0; a < 2; ++a)
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 3; ++s, ++id) fake_run(dir, id, a == 0 ? "mha" : "local(window=4)", 2 << h, s, acc[a * 2 + h][s]);
  std::ostringstream log;
  const std::string md = read(write_report(dir, log));
  CHECK(md.find("## Paired differences against `model.attention=mha, model.heads=2`") != std::string::npos);
  // mha/4 - mha/2 = +0.05 on each seed: sd 0, so the interval is the point.
  CHECK(md.find("| `model.attention=mha, model.heads=4` | 3 | +0.05 [+0.05, +0.05] |") != std::string::npos);
  CHECK(md.find("| local/4 beats mha/2 | `val_acc` |") != std::string::npos);
  CHECK(md.find("**holds** (the interval [0.0348") != std::string::npos);  // 0.3, 0.3, 0.15: 0.25 ± 0.215
  CHECK(md.find("**contradicted** (the interval [-0.") != std::string::npos);   // the reverse claim
  CHECK(md.find("**contradicted** (the interval [0.05, 0.05] is outside ±0.01)") != std::string::npos);
  CHECK(md.find("**holds** (the interval [0.7258, 0.9742] is above 0.75)") == std::string::npos);  // crosses 0.75
  CHECK(md.find("**inconclusive** (the interval [0.7258, 0.9742] contains 0.75)") != std::string::npos);
  const std::string csv = read(dir / "expectations.csv");
  CHECK(csv.rfind("name,metric,relation,a,b,observed,ci_low,ci_high,n,verdict\n", 0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 5);
  CHECK(csv.find(",holds\n") != std::string::npos);

  // A selector that names no configuration is an error naming the expectation.
  write_text_atomic((dir / "sweep.toml").string(), kSweepHead + R"x([[report.expect]]
name = "eight heads"
a = { "model.heads" = 8 }
relation = "above"
value = 0.5
)x");
  CHECK_THROWS_WITH_AS(write_report(dir, log), doctest::Contains("report.expect 'eight heads' a = {model.heads=8} names no"),
                       ValueError);
  // A configuration the sweep plans but has not completed gives an open verdict, not an error.
  write_text_atomic((dir / "sweep.toml").string(), R"x(experiment = "x"
seeds = [0, 1, 2]
[grid]
"model.attention" = ["mha", "local(window=4)"]
"model.heads" = [2, 4, 8]
[[report.expect]]
name = "eight heads"
a = { "model.attention" = "mha", "model.heads" = 8 }
relation = "above"
value = 0.5
)x");
  CHECK(read(write_report(dir, log)).find("| eight heads | `val_acc` | above | - | 0 | **inconclusive** (no complete runs yet) |") !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("report: a measured table joins each run by its variant name, for the table and the bubble chart") {
  const fs::path dir = fresh_dir("report_measured");
  const fs::path bench = dir / "bench.csv";
  // mha matches "mha" exactly; "local(window=4)" by its variant name; a row nothing uses is ignored.
  write_text_atomic(bench.string(), "variant,time_ms,memory_mib\nmha,634,789\nlocal,141,40\nlinear,94,\n");
  write_text_atomic((dir / "sweep.toml").string(),
                    kSweepHead + fmt::format(R"x([report]
metric = "val_acc"
measured = {{ file = "{}", key = "model.attention" }}
bubble = {{ x = "time_ms", y = "val_acc", size = "memory_mib", label = "model.attention" }}
)x",
                                             bench.string()));
  int id = 0;
  for (int a = 0; a < 2; ++a)
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 3; ++s, ++id) fake_run(dir, id, a == 0 ? "mha" : "local(window=4)", 2 << h, s, 0.5 + 0.1 * a);
  std::ostringstream log;
  const std::string md = read(write_report(dir, log));
  CHECK(md.find("| model.attention | model.heads | n | val_acc | memory_mib | time_ms |") != std::string::npos);
  CHECK(md.find("| `mha` | `2` | 3 | 0.5 ± 0 | 789 | 634 |") != std::string::npos);
  CHECK(md.find("| `local(window=4)` | `4` | 3 | 0.6 ± 0 | 40 | 141 |") != std::string::npos);
  CHECK(md.find("Measured outside the sweep and joined by `model.attention`") != std::string::npos);
  CHECK(md.find("No row for") == std::string::npos);
  const std::string bubble = read(dir / "plots/bubble.svg");
  CHECK(bubble.find(">local(window=4)<") != std::string::npos);

  // A configuration without a row is named; a field that is not a number names the file, line and column.
  write_text_atomic(bench.string(), "variant,time_ms\nmha,634\n");
  CHECK(read(write_report(dir, log)).find("No row for: `local(window=4)`.") != std::string::npos);
  write_text_atomic(bench.string(), "variant,time_ms\nmha,fast\n");
  CHECK_THROWS_WITH_AS(write_report(dir, log), doctest::Contains((bench.string() + ":2: column 'time_ms' must be a number").c_str()),
                       ValueError);
  write_text_atomic(bench.string(), "variant,time_ms\nmha,1\nmha,2\n");
  CHECK_THROWS_WITH_AS(write_report(dir, log), doctest::Contains(":3: a second row for 'mha'"), ValueError);
  fs::remove_all(dir);
}

namespace {

// A run directory as `attnlab run ... --run-dir` leaves it: no point.json.
fs::path adhoc_run(const fs::path& root, const std::string& name, const std::string& attention, int seed, double acc,
                   double params) {
  const fs::path d = root / name;
  fs::create_directories(d);
  write_text_atomic((d / "config.toml").string(),
                    fmt::format("seed = {}\n[model]\nattention = \"{}\"\n[train]\nlr = 0.001\n", seed, attention));
  std::string lines;
  for (int step = 1; step <= 3; ++step)
    lines += fmt::format("{{\"step\": {}, \"train_loss\": {}}}\n", step * 10, 3.0 - step * acc);
  write_text_atomic((d / "metrics.jsonl").string(), lines);
  write_text_atomic((d / "summary.json").string(),
                    fmt::format(R"x({{"experiment": "classify", "status": "complete", "steps": 30, "seconds": 2.5,
                                    "metrics": {{"val_acc": {}, "params": {}, "steps": 30}}}})x",
                                acc, params));
  return d;
}

}  // namespace

TEST_CASE("report of run directories: differing keys are the configurations, seeds grouped, counts as integers") {
  const fs::path root = fresh_dir("report_adhoc");
  const std::vector<fs::path> dirs = {
      adhoc_run(root, "a0", "mha(heads=4)", 0, 0.5, 33280), adhoc_run(root, "a1", "mha(heads=4)", 1, 0.7, 33280),
      adhoc_run(root, "b0", "local(window=4)", 0, 0.4, 16640), adhoc_run(root, "b1", "local(window=4)", 1, 0.4, 16644)};
  std::ostringstream log;
  const fs::path report = write_comparison(dirs, root / "report", "val_acc", log);
  const std::string md = read(report);
  CAPTURE(md);
  // One configuration column (model.attention; train.lr is the same everywhere, seed is grouped).
  CHECK(md.find("| model.attention | n | val_acc | params | steps |") != std::string::npos);
  // Integer counts that agree print as integers, ones that differ without exponent notation.
  CHECK(md.find("| `mha(heads=4)` | 2 | 0.6 ± 1.3 | 33280 | 30 |") != std::string::npos);
  CHECK(md.find("| `local(window=4)` | 2 | 0.4 ± 0 | 16642 ± 25 | 30 |") != std::string::npos);
  CHECK(md.find("e+0") == std::string::npos);
  CHECK(md.find("- `" + dirs[0].string() + "`: model.attention=mha(heads=4), seed=0") != std::string::npos);
  // Curves: the mean over seeds with a min-max band, said in the chart and the report.
  CHECK(md.find("the shaded band spans the seeds' minimum to maximum") != std::string::npos);
  const std::string svg = read(root / "report/plots/curve_train_loss.svg");
  CHECK(std::count(svg.begin(), svg.end(), '\n') > 5);
  size_t bands = 0;
  for (size_t p = svg.find("<polygon class=\"band\""); p != std::string::npos; p = svg.find("<polygon class=\"band\"", p + 1))
    ++bands;
  CHECK(bands == 2);  // one per configuration of two seeds
  CHECK(svg.find("shaded: min-max over seeds") != std::string::npos);
  CHECK(svg.find(">model.attention=mha(heads=4)<") != std::string::npos);  // the whole legend

  // A directory without a complete run is named.
  fs::create_directories(root / "empty");
  CHECK_THROWS_WITH_AS(write_comparison({dirs[0], root / "empty"}, root / "r2", "", log),
                       doctest::Contains(((root / "empty").string() + ": not a complete run directory").c_str()), FileError);
  fs::remove_all(root);
}

TEST_CASE("report: a stray runs/ entry whose number overflows int64 is not a run, a summary's experiment that is not a string is none") {
  const fs::path dir = fresh_dir("report_stray");
  write_text_atomic((dir / "sweep.toml").string(), "experiment = \"x\"\n[grid]\n\"model.heads\" = [2]\n");
  fake_run(dir, 0, "mha", 2, 0, 0.5);
  fs::create_directories(dir / "runs/99999999999999999999");
  fs::copy(dir / "runs/0000/summary.json", dir / "runs/99999999999999999999/summary.json");
  std::ostringstream log;
  CHECK(read(write_report(dir, log)).find("1 runs planned, 1 complete") != std::string::npos);

  const fs::path a = adhoc_run(dir, "a", "mha", 0, 0.5, 10), b = adhoc_run(dir, "b", "local(window=4)", 0, 0.4, 10);
  write_text_atomic((b / "summary.json").string(), R"({"experiment": 7, "status": "complete", "metrics": {"val_acc": 0.4}})");
  const std::string md = read(write_comparison({a, b}, dir / "report", "val_acc", log));
  CHECK(md.find("experiment") != std::string::npos);  // "classify" against "": a differing key
  fs::remove_all(dir);
}

TEST_CASE("report: keys zipped with [report] x vary with it, so they do not split the series of its plot") {
  const fs::path dir = fresh_dir("report_zip_x");
  write_text_atomic((dir / "sweep.toml").string(), R"x(experiment = "x"
seeds = [0, 1]
[zip]
"model.heads" = [2, 4]
"model.key_size" = [8, 4]
[grid]
"model.attention" = ["mha", "local(window=4)"]
[report]
metric = "val_acc"
x = "model.heads"
)x");
  // Expansion order: zip outermost, then attention, then seed.
  int id = 0;
  for (int z = 0; z < 2; ++z)
    for (const std::string attention : {"mha", "local(window=4)"})
      for (int s = 0; s < 2; ++s, ++id) {
        fake_run(dir, id, attention, 2 << z, s, 0.5 + 0.1 * z);
        write_text_atomic((dir / fmt::format("runs/{:04d}/point.json", id)).string(),
                          fmt::format(R"x({{"model.heads": {}, "model.key_size": {}, "model.attention": "{}", "seed": {}}})x",
                                      2 << z, 8 >> z, attention, s));
      }
  std::ostringstream log;
  write_report(dir, log);
  const std::string svg = read(dir / "plots/val_acc_vs_model_heads.svg");
  // One series per attention, each through both head counts; the zipped key size is no series.
  CHECK(svg.find(">model.attention=mha<") != std::string::npos);
  CHECK(svg.find(">model.attention=local(window=4)<") != std::string::npos);
  CHECK(svg.find("model.key_size") == std::string::npos);
  fs::remove_all(dir);
}
