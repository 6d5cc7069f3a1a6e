// `attnlab ngram [--preset P] [--config F] [--set K=V]... [--csv FILE]`: the n-gram calibration of
// the lm experiment's split. The config is resolved exactly as `attnlab run lm` resolves it and
// the data come from the same loader (runner::make_task), so the table is measured on the
// training and validation token ids that a run with those overrides trains and evaluates on.
// Orders 1..6 of interpolated Kneser-Ney, or with --smoothing absolute of interpolated absolute
// discounting (experiments/analysis/ngram.hpp), bits per token of the validation text; docs/experiments.md, "Where a char LM stands: the n-gram calibration".
#include <chrono>
#include <ctime>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "experiments/analysis/ngram.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/task.hpp"
#include "tensor/io.hpp"

namespace attnlab::cli {
namespace {

constexpr int kMaxOrder = 6;

CommandBody define_ngram(CLI::App& cmd) {
  struct Args {
    std::string preset, config_file, csv, smoothing = "kneser_ney";
    std::vector<std::string> sets;
  };
  auto a = std::make_shared<Args>();
  cmd.add_option("--preset", a->preset, "preset of the lm experiment, e.g. quick or full");
  cmd.add_option("--config", a->config_file, "TOML file of overrides of the lm experiment (after the preset)");
  cmd.add_option("--set", a->sets, "KEY=VALUE override of the lm experiment (after --config; repeatable)")
      ->allow_extra_args(false)
      ->take_all();
  cmd.add_option("--smoothing", a->smoothing,
                 "kneser_ney (interpolated Kneser-Ney, the default) | absolute (interpolated absolute discounting: "
                 "raw counts at every level)")
      ->check(CLI::IsMember({"kneser_ney", "absolute"}));
  cmd.add_option("--csv", a->csv, "also write the table to FILE as `order,bpc` rows (atomically)");
  cmd.footer(
      "Resolves the lm experiment's config as `attnlab run lm` does (defaults < preset < --config\n"
      "< --set), loads its task with the same loader, counts the n-grams of the training tokens and\n"
      "prints the validation bits per token of interpolated Kneser-Ney models of orders 1..6\n"
      "(--smoothing absolute: absolute discounting; experiments/analysis/ngram.hpp). The time\n"
      "taken goes to stderr.");
  return [a](std::ostream& out, std::ostream& err) {
    // A config `attnlab run lm` would refuse is a usage error here too (exit 2).
    const runner::Config config = [&] {
      try {
        return runner::resolve_config(runner::find_experiment("lm"), a->preset, a->config_file, a->sets);
      } catch (const Error& e) {
        fail<UsageError>("{}", e.what());
      }
    }();
    const runner::TaskData task = runner::make_task(config);
    if (!task.language_model)
      fail<runner::ConfigError>("task.name = {} (from {}) is not a language-model task; the n-gram calibration needs "
                                "fortunes",
                                task.name, config.origin("task.name"));
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const std::clock_t cpu_start = std::clock();
    const bool kn = a->smoothing == "kneser_ney";
    const std::vector<double> bpc =
        analysis::ngram_bits_per_token(task.train_tokens, task.val_tokens, task.vocab_size, kMaxOrder,
                                       kn ? analysis::Smoothing::kneser_ney : analysis::Smoothing::absolute);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const double cpu_seconds = double(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    out << fmt::format("{} ({} level, vocabulary {}): {} training tokens, {} validation tokens\n", task.name,
                       config.get_string("task.level"), task.vocab_size, task.train_tokens.numel(),
                       task.val_tokens.numel());
    out << (kn ? "interpolated Kneser-Ney" : "interpolated absolute discounting")
        << ", one discount per order; bits per validation token\n";
    out << "order | bpc\n";
    std::string csv = "order,bpc\n";
    for (size_t k = 0; k < bpc.size(); ++k) {
      out << fmt::format("{} | {:.4f}\n", k + 1, bpc[k]);
      csv += fmt::format("{},{:.6f}\n", k + 1, bpc[k]);
    }
    err << fmt::format("ngram: orders 1..{} counted and scored in {:.2f} s ({:.2f} s of CPU)\n", kMaxOrder, seconds,
                       cpu_seconds);
    if (!a->csv.empty()) write_text_atomic(a->csv, csv);
    return 0;
  };
}

}  // namespace

const Command kNGramCommand = {
    "ngram",
    "bits per character of n-gram models (orders 1..6, Kneser-Ney) on the lm experiment's split",
    define_ngram};

}  // namespace attnlab::cli
