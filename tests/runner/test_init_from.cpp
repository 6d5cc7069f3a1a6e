// train.init_from (experiments/runner/trainer.hpp): a fresh run starts from another run's final
// model tensors (from its run directory or its checkpoint file), a model that gains Hard Concrete
// gates keeps their fresh initialisation, and a shape mismatch, a stray tensor or a path without
// a checkpoint fail naming the key, the file and the tensor.
#include <csignal>
#include <filesystem>

#include "runner/run_helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

TensorMap g_state_at_step0;  // the model's tensors when the last run took its first step
int g_stop_at = -1;          // the step at which the experiment sends itself SIGTERM

const bool registered = register_experiment({
    .name = "test_init_from",
    .description = "tests/runner: tiny recall classifier that records its model at step 0",
    .schema = [] {
      Schema s;
      add_task_keys(s, "recall");
      models::add_model_keys(s, {.attention = "mha(heads=4)", .d_model = 16, .layers = 1, .ffn_hidden = 32});
      add_train_keys(s, {.steps = 6, .batch_size = 16, .lr = 3e-3, .warmup = 2, .eval_every = 0, .log_every = 2});
      return s;
    }(),
    .presets = {{"quick", "task.train_size = 100\ntask.val_size = 20\ntask.test_size = 20\n"}},
    .run =
        [](const Config& config, RunContext& ctx) {
          train_classifier(config, ctx, [](int64_t step, nn::Module& model) {
            if (step == g_stop_at) std::raise(SIGTERM);
            if (step != 0) return;
            g_state_at_step0.clear();
            for (auto& [name, t] : model.state_dict()) g_state_at_step0[name] = clone(t.detach());
          });
        },
});

RunResult run(const fs::path& dir, std::vector<std::string> sets) { return run_in(dir, "test_init_from", std::move(sets)); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A finished 6-step run of test_init_from (mha(heads=4) unless `sets` say otherwise).
fs::path trained_run(const std::string& name, std::vector<std::string> sets = {}) {
  fs::path dir = fresh_run_dir(name);
  REQUIRE(run(dir, std::move(sets)).status == kExitComplete);
  return dir;
}

}  // namespace

TEST_CASE("init_from: a fresh run starts from the final model tensors of a run directory or a checkpoint file") {
  fs::path source = trained_run("init_source");
  const TensorMap saved = checkpoint_of(source);
  for (const std::string& from : {source.string(), (source / "checkpoint.safetensors").string()}) {
    fs::path dir = fresh_run_dir("init_target");
    RunResult r = run(dir, {"train.init_from=" + from, "train.steps=2"});
    REQUIRE_MESSAGE(r.status == kExitComplete, r.console);
    CHECK(contains(r.console, fmt::format("init_from {}: {} tensors loaded", from, g_state_at_step0.size())));
    REQUIRE(!g_state_at_step0.empty());
    for (auto& [name, t] : g_state_at_step0) CHECK_MESSAGE(bitwise_equal(t, saved.at("model." + name)), name);
    // The optimizer starts fresh: two steps taken, from step 0.
    CHECK(checkpoint_of(dir).at("optim.step").item() == 2);
    fs::remove_all(dir);
  }
  fs::remove_all(source);
}

TEST_CASE("init_from: a resumed run restores its own checkpoint, not init_from's") {
  fs::path source = trained_run("init_resume_source");
  const std::vector<std::string> sets = {"train.init_from=" + source.string(), "train.steps=4"};
  fs::path straight = trained_run("init_resume_straight", sets);
  fs::path dir = fresh_run_dir("init_resume_stopped");
  g_stop_at = 2;  // SIGTERM during step 3: a checkpoint at step 3
  RunResult first = run(dir, sets);
  g_stop_at = -1;
  REQUIRE(first.status == kExitStopped);
  CHECK(contains(first.console, "tensors loaded"));
  RunResult second = run(dir, sets);
  CHECK(second.status == kExitComplete);
  CHECK(contains(second.console, "resuming test_init_from from step 3"));
  CHECK_FALSE(contains(second.console, "tensors loaded"));
  const TensorMap a = checkpoint_of(straight), b = checkpoint_of(dir);
  for (auto& [name, t] : a) CHECK_MESSAGE(bitwise_equal(t, b.at(name)), name);
  for (auto& p : {source, straight, dir}) fs::remove_all(p);
}

TEST_CASE("init_from: a model that gains Hard Concrete gates loads the rest and keeps the gates fresh") {
  fs::path plain = trained_run("init_plain");
  const TensorMap saved = checkpoint_of(plain);
  fs::path gated = fresh_run_dir("init_gated");
  RunResult r = run(gated, {"train.init_from=" + plain.string(), "model.attention=mha(heads=4, gate=hard_concrete, gate_init=1.5)"});
  REQUIRE_MESSAGE(r.status == kExitComplete, r.console);
  CHECK(contains(r.console, "not in the checkpoint, freshly initialised: blocks.0.attn.gate.log_alpha"));
  REQUIRE(g_state_at_step0.count("blocks.0.attn.gate.log_alpha"));
  CHECK(allclose(g_state_at_step0.at("blocks.0.attn.gate.log_alpha"), full({4}, 1.5)));
  for (auto& [name, t] : g_state_at_step0)
    if (name.find(".gate.") == std::string::npos) CHECK_MESSAGE(bitwise_equal(t, saved.at("model." + name)), name);

  // And back: the gated run's checkpoint into a model without gates leaves the gates out.
  fs::path back = fresh_run_dir("init_back");
  RunResult b = run(back, {"train.init_from=" + gated.string()});
  REQUIRE_MESSAGE(b.status == kExitComplete, b.console);
  CHECK(contains(b.console, "gate tensors the model lacks, not loaded: blocks.0.attn.gate.log_alpha"));
  for (auto& p : {plain, gated, back}) fs::remove_all(p);
}

TEST_CASE("init_from: a shape mismatch, a stray tensor or a path without a checkpoint fails and says which") {
  fs::path source = trained_run("init_errors");
  const Dims head = checkpoint_of(source).at("model.head.weight").shape();  // (classes, 16)

  fs::path dir = fresh_run_dir("init_errors_target");
  RunResult narrow = run(dir, {"train.init_from=" + source.string(), "model.d_model=8"});
  CHECK(narrow.status == kExitFailed);
  CHECK(contains(narrow.console, "train.init_from: " + (source / "checkpoint.safetensors").string()));
  CHECK(contains(narrow.console, fmt::format("'head.weight' has shape {} in the checkpoint but {} in the model",
                                             to_string(head), to_string(Dims{head[0], 8}))));
  fs::remove_all(dir);

  // Two layers: the second block is not in the checkpoint; one layer less would leave a stray one.
  RunResult deeper = run(dir, {"train.init_from=" + source.string(), "model.layers=2"});
  CHECK(deeper.status == kExitFailed);
  CHECK(contains(deeper.console, "'blocks.1.attn.q_proj.weight' is not in the checkpoint"));
  fs::remove_all(dir);

  const std::string nowhere = (source / "nowhere").string();
  RunResult missing = run(dir, {"train.init_from=" + nowhere});
  CHECK(missing.status == kExitFailed);
  CHECK(contains(missing.console, fmt::format("train.init_from: '{}' does not exist", nowhere)));
  fs::remove_all(dir);

  fs::path empty = fresh_run_dir("init_errors_empty");
  fs::create_directories(empty);
  RunResult no_checkpoint = run(dir, {"train.init_from=" + empty.string()});
  CHECK(no_checkpoint.status == kExitFailed);
  CHECK(contains(no_checkpoint.console, fmt::format("train.init_from: '{}' holds no checkpoint", empty.string())));
  for (auto& p : {source, dir, empty}) fs::remove_all(p);
}
