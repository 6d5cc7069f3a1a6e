// `attnlab demo` (`make demo`): the attention shoot-out. A sweep compiled into the binary trains
// six attention variants on associative recall with the `classify` experiment, two at a time,
// into a sweep directory (default demo/), then prints the results table and writes the report
// (report.md, plots/ with the accuracy/speed/memory bubble chart) through the ordinary sweep and
// report code, so everything in docs/sweeps.md applies: re-running skips complete runs and
// resumes interrupted ones. `attnlab demo --mlp` is the engine's smoke test without the runner:
// a two-layer MLP fitted by gradient descent.
//
// Why associative recall with one token per pair: it is a small task on which attention variants
// visibly differ within two minutes. Answering needs content-based lookup of the queried key among
// six pairs. With each pair one token, one layer can match the query against the pairs' key part:
// dense softmax heads and the kernel approximations (performer, elu+1 linear) solve it within
// 800-1600 steps on every seed, a two-position window sees only the pairs near the query, and
// content-free synthesized weights mostly do not find the key within the 2000 steps (keys are
// drawn from 16: with 8, fixed weights copying the query onto every pair plus the feed-forward
// layer learn the matches by step 2000 on every seed; with 16, on seed 3 of 0-3). In the two-token layout (k v) a first layer must move each key
// onto its value's position: a plateau that ends after 1500-3000 steps, at a step that moves with
// the seed and the BLAS kernel's rounding. docs/experiments.md has measured tables of both.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <CLI/CLI.hpp>

#include "attnlab.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/runner/report.hpp"
#include "experiments/runner/stats.hpp"
#include "experiments/runner/store.hpp"
#include "experiments/runner/sweep.hpp"
#include "tensor/blas_info.hpp"
#include "tensor/io.hpp"
#include "experiments/runner/file_bounds.hpp"

#include <nlohmann/json.hpp>

namespace attnlab::cli {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kDefaultSteps = 2000;

// The shoot-out. @STEPS@, @WARMUP@ and @EVAL_EVERY@ are filled in by demo_sweep_text.
constexpr const char* kDemoSweep = R"toml(# attnlab demo: the attention shoot-out (experiments/cli/demo.cpp, docs/experiments.md).
experiment = "classify"
workers = 2
seeds = [0, 1, 2]                  # a ranking is read from means over seeds, never from one run

[set]
"task.name" = "recall"            # 6 key/value pairs and a query -> the query's value (N = 7)
"task.pair_tokens" = 1             # one token per pair: one layer can match the query to a key
"task.num_pairs" = 6
"task.num_keys" = 16               # with 8, synthesizer's fixed weights + FFN learn the matches by step 1200
"task.num_values" = 8              # chance: 1/8
"task.train_size" = 20000          # more examples than the run sees: no memorising
"model.d_model" = 64
"model.layers" = 2
"model.ffn_hidden" = 128
"train.batch_size" = 32
"train.lr" = 0.003
"train.steps" = @STEPS@
"train.warmup" = @WARMUP@
"train.eval_every" = @EVAL_EVERY@

[grid]
"model.attention" = [
  "mha(heads=4)",
  "talking_heads(heads=4)",
  "local(window=2, heads=4)",
  "linear(heads=4)",
  "performer(heads=4, features=64)",
  "synthesizer(heads=4, parts=random, max_len=32)",
]

[report]
metric = "val_acc"
curves = ["train_loss", "val_acc"]
bubble = { x = "steps_per_s", y = "val_acc", size = "peak_rss_mb", label = "model.attention" }
)toml";

std::string demo_sweep_text(int64_t steps) {
  std::string text = kDemoSweep;
  auto fill = [&](const std::string& name, int64_t value) {
    text.replace(text.find(name), name.size(), std::to_string(value));
  };
  fill("@STEPS@", steps);
  fill("@WARMUP@", std::max<int64_t>(1, steps / 20));
  fill("@EVAL_EVERY@", std::max<int64_t>(1, steps / 5));
  return text;
}

// The shoot-out's table on `out`, best mean val_acc first, from the sweep directory's store: per
// variant the mean over seeds with its 95% interval and the seeds' range, then the mean speed
// and memory. Variants whose intervals overlap are not ranked by this run.
void print_table(const fs::path& dir, std::ostream& out) {
  runner::Store store(dir / "results.sqlite");
  struct Row {
    std::string variant;
    std::vector<double> acc, speed, memory;
  };
  std::vector<Row> rows;
  std::vector<std::string> failed;
  for (const auto& r : store.runs()) {
    const auto point = nlohmann::json::parse(r.point_json);
    const std::string variant = point.value("model.attention", "?");
    if (r.status != "complete") {
      failed.push_back(fmt::format("{} seed {}", variant, point.value("seed", int64_t(0))));
      continue;
    }
    auto metric = [&](const char* name) {
      auto it = r.metrics.find(name);
      return it == r.metrics.end() ? NAN : it->second;
    };
    auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& row) { return row.variant == variant; });
    if (it == rows.end()) it = rows.insert(rows.end(), Row{variant, {}, {}, {}});
    it->acc.push_back(metric("val_acc"));
    it->speed.push_back(metric("steps_per_s"));
    it->memory.push_back(metric("peak_rss_mb"));
  }
  auto mean = [](const std::vector<double>& xs) { return runner::mean_interval(xs).mean; };
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) { return mean(a.acc) > mean(b.acc); });
  size_t width = 7;
  for (const auto& r : rows) width = std::max(width, r.variant.size());
  out << fmt::format("\n{:<{}}  {:>5}  {:>15}  {:>13}  {:>8}  {:>12}\n", "variant", width, "seeds", "val_acc (95%)",
                     "seed range", "steps/s", "peak_rss_mb");
  for (const auto& r : rows) {
    const runner::Interval acc = runner::mean_interval(r.acc);
    const auto [lo, hi] = std::minmax_element(r.acc.begin(), r.acc.end());
    out << fmt::format("{:<{}}  {:>5}  {:>7.3f} ± {:<5.3f}  {:>5.3f} - {:<5.3f}  {:>8.1f}  {:>12.1f}\n", r.variant, width,
                       acc.n, acc.mean, acc.n > 1 ? acc.half_width() : 0.0, *lo, *hi, mean(r.speed), mean(r.memory));
  }
  for (const auto& v : failed) out << fmt::format("{:<{}}  failed (see its runs/NNNN/stdout.txt)\n", v, width);
  out << fmt::format("\nval_acc: mean over seeds ± half-width of its 95% interval (Student t); variants whose intervals "
                     "overlap are tied.\nBLAS: {}\n", blas_description());
  // The demo's numbers move with the kernel (products round differently, and a run that breaks
  // its plateau late can flip); a slower kernel than the CPU allows is said.
  if (const std::string hint = blas_kernel_hint(); !hint.empty()) out << hint << "\n";
}

// The two-layer MLP of the first demo: y = sin(3 x0) + 0.5 x1^2 - x0 x1 on 512 random points in
// [-1, 1]^2, fitted by gradient descent with momentum. Exit status 1 unless the loss falls 10x.
int mlp_demo(std::ostream& out) {
  Generator gen(42);
  Tensor x = rand({512, 2}, gen, kFloat32, -1, 1);
  Tensor x0 = select(x, 1, 0), x1 = select(x, 1, 1);
  Tensor y = unsqueeze(sin(x0 * 3.0) + square(x1) * 0.5 - x0 * x1, 1);  // (512, 1)

  const int64_t hidden = 64;
  Tensor w1 = randn({2, hidden}, gen, kFloat32, 0, 1.0 / std::sqrt(2.0)).requires_grad_();
  Tensor b1 = zeros({hidden}).requires_grad_();
  Tensor w2 = randn({hidden, 1}, gen, kFloat32, 0, 1.0 / std::sqrt(double(hidden))).requires_grad_();
  Tensor b2 = zeros({1}).requires_grad_();
  std::vector<Tensor*> params = {&w1, &b1, &w2, &b2};

  out << "attnlab demo --mlp: a 2-64-1 tanh MLP fitted by gradient descent (lr 0.1, momentum 0.9)\n";
  std::vector<Tensor> velocity;
  for (Tensor* p : params) velocity.push_back(zeros_like(*p));
  const int steps = 2000;
  double first = 0, last = 0;
  for (int step = 0; step <= steps; ++step) {
    Tensor h = tanh(matmul(x, w1) + b1);  // (512, 64)
    Tensor pred = matmul(h, w2) + b2;     // (512, 1)
    Tensor loss = mean(square(pred - y));
    for (Tensor* p : params) p->set_grad(Tensor());
    loss.backward();
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        mul_(velocity[i], 0.9);
        add_(velocity[i], params[i]->grad());
        add_(*params[i], velocity[i], -0.1);
      }
    }
    last = loss.item();
    if (step == 0) first = last;
    if (step % 200 == 0) out << fmt::format("step {:5d}  mse {:.6f}\n", step, last);
  }
  out << fmt::format("loss fell from {:.4f} to {:.6f} ({:.0f}x)\n", first, last, first / last);
  return last < first / 10 ? 0 : 1;
}

struct DemoArgs {
  std::string out = "demo";
  int64_t steps = kDefaultSteps;
  int workers = 0;  // 0: the sweep file's
  bool mlp = false;
};

int shoot_out(const DemoArgs& a, std::ostream& out) {
  const int64_t steps = a.steps;
  const fs::path dir = a.out;
  // The embedded sweep is written beside its runs, so that `attnlab sweep DIR/demo.toml --out
  // DIR` and `attnlab report DIR` work on it as on any sweep.
  // A directory holding the demo with another --steps would have its runs renumbered or mixed.
  const std::string text = demo_sweep_text(steps);
  if (fs::exists(dir / "sweep.toml")) {
    const std::string held = read_text((dir / "sweep.toml").string(), runner::kConfigFileBound);
    if (held != text)
      fail<UsageError>("{} holds a demo (or sweep) with other settings than --steps {}: use another --out, or "
                       "delete the directory", dir.string(), steps);
  }
  fs::create_directories(dir);
  const fs::path file = dir / "demo.toml";
  write_text_atomic(file.string(), text);
  runner::SweepOptions options;
  options.sweep_file = file.string();
  options.dir = dir;
  options.workers = a.workers;
  out << fmt::format("attnlab demo: six attention variants on associative recall, three seeds, {} steps each, into "
                     "{}\n", steps, dir.string());
  const int status = runner::run_sweep(options, out);
  if (status == 3) {
    out << "stopped: run the same command again to continue\n";
    return 3;
  }
  const fs::path report = runner::write_report(dir, out);
  print_table(dir, out);
  out << fmt::format("\nreport: {} (plots in {}, the accuracy/speed/memory bubble chart is {})\n", report.string(),
                     (dir / "plots").string(), (dir / "plots" / "bubble.svg").string());
  return status;
}

CommandBody define_demo(CLI::App& cmd) {
  auto a = std::make_shared<DemoArgs>();
  auto* out = cmd.add_option("--out", a->out, "the sweep directory (default: demo); re-running skips complete runs "
                                              "and resumes interrupted ones");
  auto* steps = cmd.add_option("--steps", a->steps, "training steps per variant (default 2000); another N needs "
                                                    "another --out")
                    ->check(int_range(1, 10'000'000));
  auto* workers = cmd.add_option("--workers", a->workers, "runs at a time (default 2)")->check(int_range(1, 1024));
  cmd.add_flag("--mlp", a->mlp, "instead: fit a two-layer MLP by gradient descent and print the loss falling")
      ->excludes(out)
      ->excludes(steps)
      ->excludes(workers);
  cmd.footer(
      "The attention shoot-out: six attention variants (mha, talking_heads, local, linear, performer,\n"
      "synthesizer) trained by the `classify` experiment on associative recall over three seeds, two\n"
      "runs at a time (under two minutes on two idle cores, also under OpenBLAS's SSE3 fallback kernel).\n"
      "Prints per variant the mean val_acc with its 95% interval and the seeds' range,\n"
      "steps/s and peak memory, and writes DIR/report.md with plots (bubble chart: plots/bubble.svg).\n"
      "Exit status 3: stopped by a signal; run it again.");
  return [a](std::ostream& out, std::ostream&) { return a->mlp ? mlp_demo(out) : shoot_out(*a, out); };
}

}  // namespace

const Command kDemoCommand = {
    "demo",
    "the attention shoot-out: six variants trained on associative recall over three seeds, a results table and a "
    "report with a bubble chart; --mlp fits a two-layer MLP instead",
    define_demo};

}  // namespace attnlab::cli
