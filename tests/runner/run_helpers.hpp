// Helpers for the tests that start whole runs through run_experiment: the run function of their
// test experiments, fresh temporary run directories, a run with its console captured, and
// bitwise comparison of checkpoints.
#pragma once
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/models/models.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/trainer.hpp"
#include "helpers.hpp"
#include "nn/loss.hpp"

namespace attnlab::testing {

// The run of a test experiment: a classifier on the config's task, trained by the Trainer with
// val_acc at each evaluation and in the summary. `before_step(step, model)` runs as each step
// begins (to send a signal, or to look at the model).
inline void train_classifier(const runner::Config& config, runner::RunContext& ctx,
                             const std::function<void(int64_t, nn::Module&)>& before_step) {
  const runner::TaskData& task = ctx.data();
  auto model = models::build_classifier(config, task);
  data::DataLoader loader(task.train, config.get_int("train.batch_size"), true, uint64_t(config.get_int("seed")), true);
  runner::Trainer trainer(ctx, *model);
  trainer.add_loader("train", loader);
  trainer.loss = [&](int64_t step) {
    before_step(step, *model);
    data::Batch b = loader.next();
    return nn::cross_entropy(model->forward(b.inputs), b.targets);
  };
  trainer.evaluate = [&](int64_t) {
    return std::map<std::string, double>{{"val_acc", models::evaluate_classifier(*model, task, task.val).accuracy}};
  };
  if (!trainer.fit()) return;
  ctx.summary("val_acc", models::evaluate_classifier(*model, task, task.val).accuracy);
}

// A temporary directory named after the test and the process, removed if it exists.
inline std::filesystem::path fresh_run_dir(const std::string& name) {
  std::filesystem::path d =
      std::filesystem::temp_directory_path() / fmt::format("attnlab_test_run_{}_{}", name, long(getpid()));
  std::filesystem::remove_all(d);
  return d;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct RunResult {
  int status;
  std::string console;
};

inline RunResult run_in(const std::filesystem::path& dir, const std::string& experiment, std::vector<std::string> sets,
                        const std::string& preset = "quick") {
  std::ostringstream console;
  runner::RunRequest r{experiment, preset, "", std::move(sets), dir, "test"};
  int status = runner::run_experiment(r, console, false);
  return {status, console.str()};
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = contiguous(a), y = contiguous(b);
  return std::memcmp(x.raw_data(), y.raw_data(), size_t(x.numel()) * itemsize(x.dtype())) == 0;
}

// The checkpoint.safetensors of a run directory.
inline TensorMap checkpoint_of(const std::filesystem::path& dir) {
  return load_safetensors((dir / "checkpoint.safetensors").string());
}

// metrics.jsonl without the "time" field (wall-clock, differs between runs).
inline std::vector<nlohmann::json> metrics_without_time(const std::filesystem::path& dir) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(dir / "metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    CHECK(j.contains("time"));
    j.erase("time");
    out.push_back(j);
  }
  return out;
}

}  // namespace attnlab::testing
