// `attnlab ngram` (experiments/cli/ngram.cpp): the committed docs/results/lm_claims/ngram.csv is
// what the code computes on that study's split; the printed table agrees with the CSV and with
// the library on the lm experiment's task; config and task errors.
#include <filesystem>
#include <sstream>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/command_run.hpp"
#include "experiments/analysis/ngram.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/task.hpp"
#include "helpers.hpp"

using namespace attnlab;
namespace fs = std::filesystem;

namespace {

testing::CommandRun ngram(const std::vector<std::string>& args) { return testing::run_command(cli::run_ngram, args); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("attnlab ngram: the committed lm_claims ngram.csv is what the code computes on that split") {
  // lm_claims' sweep sets task.length = 64 and no preset; the other task.* keys are the defaults.
  const fs::path csv = fs::temp_directory_path() / fmt::format("attnlab_ngram_{}.csv", getpid());
  const testing::CommandRun r = ngram({"--set", "task.length=64", "--csv", csv.string()});
  REQUIRE_MESSAGE(r.status == 0, r.err);
  CHECK(read_text(csv.string()) == read_text(ATTNLAB_SOURCE_DIR "/docs/results/lm_claims/ngram.csv"));
  CHECK(contains(r.out, "order | bpc\n1 | "));
  CHECK(contains(r.out, "\n6 | "));
  CHECK(contains(r.err, "counted and scored in"));
  // Each printed row is the CSV's value to 4 decimals.
  std::istringstream rows(read_text(csv.string()));
  std::string line;
  std::getline(rows, line);
  CHECK(line == "order,bpc");
  for (int k = 1; std::getline(rows, line); ++k) {
    const double bpc = std::stod(line.substr(line.find(',') + 1));
    CHECK(contains(r.out, fmt::format("\n{} | {:.4f}\n", k, bpc)));
  }
  fs::remove(csv);
}

TEST_CASE("attnlab ngram: the table is the library's on the lm experiment's task, falling with the order") {
  const runner::Config config = runner::resolve_config(runner::find_experiment("lm"), "quick", "", {"task.length=32"});
  const runner::TaskData task = runner::make_task(config);
  const std::vector<double> bpc =
      analysis::ngram_bits_per_token(task.train_tokens, task.val_tokens, task.vocab_size, 6);
  const testing::CommandRun r = ngram({"--preset", "quick", "--set", "task.length=32"});
  REQUIRE_MESSAGE(r.status == 0, r.err);
  for (size_t k = 0; k < bpc.size(); ++k) {
    CHECK(contains(r.out, fmt::format("\n{} | {:.4f}\n", k + 1, bpc[k])));
    if (k > 0) CHECK(bpc[k] < bpc[k - 1]);
  }
  // The split's size and vocabulary are those of the loaded task.
  CHECK(contains(r.out, fmt::format("vocabulary {}): {} training tokens, {} validation tokens", task.vocab_size,
                                    task.train_tokens.numel(), task.val_tokens.numel())));
  // Absolute discounting agrees at order 1 and is worse above order 2 on this text.
  const testing::CommandRun a = ngram({"--smoothing", "absolute"});
  REQUIRE_MESSAGE(a.status == 0, a.err);
  CHECK(contains(a.out, "interpolated absolute discounting"));
  CHECK(contains(a.out, fmt::format("\n1 | {:.4f}\n", bpc[0])));
}

TEST_CASE("attnlab ngram: a config run lm refuses is a usage error, a task without text fails naming it") {
  testing::CommandRun r = ngram({"--set", "task.lenght=64"});
  CHECK(r.status == 2);
  CHECK(contains(r.err, "attnlab ngram: "));
  CHECK(contains(r.err, "task.lenght"));
  r = ngram({"--preset", "huge"});
  CHECK(r.status == 2);
  CHECK(contains(r.err, "huge"));
  r = ngram({"--smoothing", "witten_bell"});
  CHECK(r.status == 2);
  r = ngram({"--set", "task.name=copy"});
  CHECK(r.status == 1);
  CHECK(contains(r.err, "task.name = copy (from --set) is not a language-model task"));
}
