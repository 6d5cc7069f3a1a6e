// The runner end to end (experiments/runner/experiment.hpp, trainer.hpp): the run directory's
// files, a run stopped by SIGTERM and resumed ending bitwise equal to a straight run with no
// metrics step recorded twice, a complete run re-run as a no-op, a changed config refused, and
// usage errors (bad --set, unknown preset) as exit status 2.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "experiments/models/models.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/trainer.hpp"
#include "runner/run_helpers.hpp"
#include "tensor/matmul_route.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

int g_stop_at = -1;    // the step at which the test experiment sends itself SIGTERM
int g_stop_signals = 1;  // how many SIGTERMs it sends then

// A tiny classifier with dropout and attention dropout (so the default generator and the
// generators the layers own matter) on recall.
const bool registered = register_experiment({
    .name = "test_resume",
    .description = "tests/runner: tiny recall classifier with dropout",
    .schema = [] {
      Schema s;
      add_task_keys(s, "recall");
      models::add_model_keys(s, {.attention = "mha(heads=2, attn_dropout=0.1)", .d_model = 16, .layers = 1, .ffn_hidden = 32,
                                  .dropout = 0.1});
      add_train_keys(s, {.steps = 30, .batch_size = 16, .lr = 3e-3, .warmup = 5, .eval_every = 5, .log_every = 3,
                         .checkpoint_every = 4});
      return s;
    }(),
    .presets = {{"quick", "task.train_size = 200\ntask.val_size = 50\ntask.test_size = 50\n"}},
    .run =
        [](const Config& config, RunContext& ctx) {
          train_classifier(config, ctx, [](int64_t step, nn::Module&) {
            if (step == g_stop_at)
              for (int i = 0; i < g_stop_signals; ++i) std::raise(SIGTERM);
          });
        },
});

fs::path fresh_dir(const std::string& name) { return fresh_run_dir(name); }
std::string read(const fs::path& p) { return read_file(p); }
using Result = RunResult;

Result run(const fs::path& dir, std::vector<std::string> sets = {}, const std::string& preset = "quick",
           const std::string& experiment = "test_resume") {
  return run_in(dir, experiment, std::move(sets), preset);
}

// Runs test_resume straight and stopped by SIGTERM during step 10 then resumed, with `sets`;
// the two must end bitwise equal with the same metrics lines.
void check_stop_and_resume(const std::string& name, const std::vector<std::string>& sets) {
  fs::path straight = fresh_dir(name + "_straight"), resumed = fresh_dir(name + "_resumed");
  REQUIRE(run(straight, sets).status == kExitComplete);

  g_stop_at = 9;  // SIGTERM during step 10; the trainer saves a checkpoint at step 10 and returns
  Result first = run(resumed, sets);
  g_stop_at = -1;
  CHECK(first.status == kExitStopped);
  CHECK(first.console.find("stopped at step 10") != std::string::npos);
  CHECK_FALSE(fs::exists(resumed / "summary.json"));
  // A stale line past the checkpoint, as a crash between two checkpoints leaves: dropped on resume.
  std::ofstream(resumed / "metrics.jsonl", std::ios::app) << "{\"step\":11,\"time\":1.0,\"train_loss\":9}\n";

  Result second = run(resumed, sets);
  CHECK(second.status == kExitComplete);
  CHECK(second.console.find("resuming test_resume from step 10") != std::string::npos);

  CHECK(metrics_without_time(resumed) == metrics_without_time(straight));
  TensorMap a = checkpoint_of(straight), b = checkpoint_of(resumed);
  REQUIRE(a.size() == b.size());
  for (auto& [name, t] : a) {
    REQUIRE(b.count(name));
    CHECK_MESSAGE(bitwise_equal(t, b.at(name)), name);
  }
  auto sa = nlohmann::json::parse(read(straight / "summary.json")), sb = nlohmann::json::parse(read(resumed / "summary.json"));
  CHECK(sa["metrics"] == sb["metrics"]);
  CHECK(sa["steps"] == sb["steps"]);
  auto meta = nlohmann::json::parse(read(resumed / "meta.json"));
  CHECK(meta["resumed_at"].size() == 1);
  REQUIRE(meta["segments"].size() == 2);
  CHECK(meta["segments"][1]["threads"] == meta["segments"][0]["threads"]);
  CHECK(second.console.find("warning") == std::string::npos);
  fs::remove_all(straight);
  fs::remove_all(resumed);
}

}  // namespace

TEST_CASE("run: the run directory holds config, meta, log, metrics, checkpoint and summary") {
  fs::path dir = fresh_dir("files");
  Result r = run(dir, {"train.steps=12"});
  REQUIRE(r.status == kExitComplete);
  for (const char* f : {"config.toml", "meta.json", "log.txt", "metrics.jsonl", "checkpoint.safetensors", "summary.json"})
    CHECK_MESSAGE(fs::exists(dir / f), f);
  Config c(find_experiment("test_resume").schema);
  c.merge_file((dir / "config.toml").string());
  CHECK(c.get_int("train.steps") == 12);
  CHECK(c.get_int("task.train_size") == 200);
  auto meta = nlohmann::json::parse(read(dir / "meta.json"));
  CHECK(meta["experiment"] == "test_resume");
  CHECK(meta["preset"] == "quick");
  CHECK(meta["threads"].get<int>() == num_threads());
  CHECK(meta["git_commit"].is_string());
  CHECK(meta["git_commit"].get<std::string>().size() >= 7);
  CHECK(meta["hostname"].is_string());
  CHECK(meta["cpu_model"].is_string());
  // The float32 product route, in meta.json and in the log (tensor/matmul_route.hpp).
  const std::string route = meta["matmul"].get<std::string>();
  CHECK(route.rfind(std::string(matmul_route_name(matmul_route())) + ": ", 0) == 0);
  CHECK(read(dir / "log.txt").find("matmul: " + route) != std::string::npos);
  CHECK(meta["start_time"].get<std::string>().back() == 'Z');
  auto summary = nlohmann::json::parse(read(dir / "summary.json"));
  CHECK(summary["status"] == "complete");
  CHECK(summary["steps"] == 12);
  CHECK(summary["peak_rss_mb"].get<double>() > 1);
  CHECK(summary["metrics"].contains("val_acc"));
  auto lines = metrics_without_time(dir);
  // train_loss every 3 steps, val_acc every 5 and at the end: one line per step.
  REQUIRE(lines.size() == 6);
  std::vector<int> steps;
  for (auto& j : lines) steps.push_back(j["step"].get<int>());
  CHECK(steps == std::vector<int>{3, 5, 6, 9, 10, 12});
  CHECK(lines[0].contains("train_loss"));
  CHECK(lines[1].contains("val_acc"));
  CHECK(lines[5].contains("train_loss"));
  CHECK(lines[5].contains("val_acc"));
  fs::remove_all(dir);
}

TEST_CASE("run: stopped by SIGTERM and resumed, a run ends bitwise equal to a straight run") {
  check_stop_and_resume("plain", {});
}

TEST_CASE("run: two SIGTERMs at once (a scheduler's and the sweep's) stop the run once, with a checkpoint") {
  fs::path dir = fresh_dir("two_sigterms");
  g_stop_at = 6;  // both during step 7: the process survives the second and saves step 7
  g_stop_signals = 2;
  Result first = run(dir);
  g_stop_at = -1;
  g_stop_signals = 1;
  CHECK(first.status == kExitStopped);
  CHECK(first.console.find("stopped at step 7") != std::string::npos);
  CHECK(run(dir).status == kExitComplete);
  fs::remove_all(dir);
}

TEST_CASE("run: with train.groups, a stopped and resumed run ends bitwise equal to a straight run") {
  // Three extra optimizer groups (the attention split in two, the classifier head in one), each
  // with its own base lr in the scheduler's checkpoint.
  check_stop_and_resume("groups", {"train.groups=*.attn.*: lr=1e-2; head.*: lr=1e-4, weight_decay=0.1"});
}

TEST_CASE("run: a complete run is not run again, a changed config is refused") {
  fs::path dir = fresh_dir("again");
  REQUIRE(run(dir, {"train.steps=4"}).status == kExitComplete);
  const std::string summary = read(dir / "summary.json"), metrics = read(dir / "metrics.jsonl");
  Result again = run(dir, {"train.steps=4"});
  CHECK(again.status == kExitComplete);
  CHECK(again.console.find("complete run") != std::string::npos);
  CHECK(read(dir / "summary.json") == summary);
  CHECK(read(dir / "metrics.jsonl") == metrics);

  fs::remove(dir / "summary.json");  // now an unfinished run at step 4
  Result changed = run(dir, {"train.steps=5"});
  CHECK(changed.status == kExitUsage);
  CHECK(changed.console.find("'train.steps' (run directory: 4, now: 5)") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "summary.json"));
  fs::remove_all(dir);
}

TEST_CASE("run: usage errors exit 2 and name the culprit") {
  fs::path dir = fresh_dir("usage");
  Result bad_set = run(dir, {"train.step=3"});
  CHECK(bad_set.status == kExitUsage);
  CHECK(bad_set.console.find("--set: unknown key 'train.step' (did you mean 'train.steps'?)") != std::string::npos);
  Result bad_value = run(dir, {"train.steps=many"});
  CHECK(bad_value.status == kExitUsage);
  CHECK(bad_value.console.find("'train.steps' expects int") != std::string::npos);
  Result bad_preset = run(dir, {}, "huge");
  CHECK(bad_preset.status == kExitUsage);
  CHECK(bad_preset.console.find("no preset 'huge' (presets: quick)") != std::string::npos);
  Result bad_exp = run(dir, {}, "", "nope");
  CHECK(bad_exp.status == kExitUsage);
  CHECK(bad_exp.console.find("unknown experiment 'nope'") != std::string::npos);
  CHECK_FALSE(fs::exists(dir));  // nothing written
  fs::create_directories(dir);
  std::ofstream(dir / "notes.txt") << "not a run";
  CHECK(run(dir).status == kExitUsage);
  fs::remove_all(dir);
}

TEST_CASE("run: a failing experiment exits 1 and keeps its log") {
  fs::path dir = fresh_dir("fail");
  Result r = run(dir, {"task.num_pairs=20"});  // more pairs than the 16 distinct keys
  CHECK(r.status == kExitFailed);
  CHECK(r.console.find("task.num_pairs 20 exceeds task.num_keys 16") != std::string::npos);
  CHECK(read(dir / "log.txt").find("test_resume failed") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("run: a diverging loss fails the run, naming the Trainer, the step and the loss") {
  fs::path dir = fresh_dir("diverge");
  Result r = run(dir, {"train.lr=1e30"});
  CAPTURE(r.console);
  CHECK(r.status == kExitFailed);
  CHECK(r.console.find("Trainer: the loss is") != std::string::npos);
  CHECK(r.console.find(" at step ") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "summary.json"));
  fs::remove_all(dir);
}

TEST_CASE("run: a checkpoint whose steps are doctored is refused before any metric line is dropped") {
  fs::path dir = fresh_dir("doctored");
  g_stop_at = 9;  // a checkpoint at step 10, metrics up to step 10
  Result first = run(dir);
  g_stop_at = -1;
  REQUIRE(first.status == kExitStopped);
  const fs::path ckpt = dir / "checkpoint.safetensors";
  Metadata meta;
  const TensorMap state = load_safetensors(ckpt.string(), &meta);
  REQUIRE(meta.at("step") == "10");
  REQUIRE(state.at("run.step").to_vector<int64_t>() == std::vector<int64_t>{10});
  const std::string metrics = read(dir / "metrics.jsonl");
  auto save = [&](const std::string& step, const TensorMap& tensors) {
    Metadata m = meta;
    m["step"] = step;
    save_safetensors(ckpt.string(), tensors, m);
  };
  // Not an integer, or one that disagrees with the run.step and trainer.step tensors.
  for (std::string step : {"44abc", "4.4e1", "-5", " 10", "", "1000000", "0", "9"}) {
    CAPTURE(step);
    save(step, state);
    Result r = run(dir);
    CHECK(r.status == kExitFailed);
    CHECK(r.console.find("checkpoint.safetensors") != std::string::npos);
    const bool integer = step.find_first_not_of("0123456789") == std::string::npos && !step.empty();
    CHECK(r.console.find(integer ? "steps disagree: metadata 'step' = " + step : "'step' is \"" + step + "\"") !=
          std::string::npos);
    CHECK(read(dir / "metrics.jsonl") == metrics);
  }
  // All three agree on a step the run cannot have reached.
  TensorMap beyond = state;
  std::vector<int64_t> trainer_step = state.at("trainer.step").to_vector<int64_t>();
  trainer_step[0] = 1000000;
  beyond["trainer.step"] = from_vector(trainer_step, {int64_t(trainer_step.size())});
  beyond["run.step"] = from_vector(std::vector<int64_t>{1000000}, {1});
  save("1000000", beyond);
  Result r = run(dir);
  CHECK(r.status == kExitFailed);
  CHECK(r.console.find("the checkpoint is at step 1000000, beyond train.steps = 30") != std::string::npos);
  CHECK(read(dir / "metrics.jsonl") == metrics);
  // The untouched checkpoint resumes.
  save("10", state);
  CHECK(run(dir).status == kExitComplete);
  fs::remove_all(dir);
}

namespace {

// Runs `dir` until a stop at step 5, lets `between` change the directory, then finishes it with
// `threads` threads; returns the second process's result.
Result stop_then_finish_with(const fs::path& dir, int threads, const std::function<void()>& between = [] {}) {
  const int before = num_threads();
  g_stop_at = 5;
  REQUIRE(run(dir).status == kExitStopped);
  g_stop_at = -1;
  between();
  set_num_threads(threads);
  Result r = run(dir);
  set_num_threads(before);
  return r;
}

}  // namespace

TEST_CASE("run: resuming with another thread count warns, and meta.json records each process's count") {
  fs::path dir = fresh_dir("threads");
  const int before = num_threads(), other = before == 1 ? 2 : 1;
  Result r = stop_then_finish_with(dir, other);
  CHECK(r.status == kExitComplete);
  CHECK(r.console.find(fmt::format("warning: resuming with {} threads, the run's previous process had {}", other, before)) !=
        std::string::npos);
  auto meta = nlohmann::json::parse(read(dir / "meta.json"));
  REQUIRE(meta["segments"].size() == 2);
  CHECK(meta["segments"][0]["threads"] == before);
  CHECK(meta["segments"][1]["threads"] == other);
  CHECK(meta["segments"][1]["start"] == meta["resumed_at"][0]);
  fs::remove_all(dir);
}

TEST_CASE("run: a run that stopped before its first checkpoint starts again without the thread-count warning") {
  fs::path dir = fresh_dir("threads_no_checkpoint");
  const int other = num_threads() == 1 ? 2 : 1;
  Result r = stop_then_finish_with(dir, other, [&] {
    REQUIRE(fs::remove(dir / "checkpoint.safetensors"));  // as if the process had stopped before its first one
  });
  CHECK(r.status == kExitComplete);
  CHECK(r.console.find("warning: resuming with") == std::string::npos);
  auto meta = nlohmann::json::parse(read(dir / "meta.json"));
  REQUIRE(meta["segments"].size() == 2);  // the second process is still recorded
  CHECK(meta["segments"][1]["threads"] == other);
  fs::remove_all(dir);
}

TEST_CASE("catalog: every preset resolves, and load_run rebuilds a run's model") {
  for (const Experiment* e : experiments())
    for (const auto& [preset, text] : e->presets) CHECK_NOTHROW(resolve_config(*e, preset, "", {}));
  fs::path dir = fresh_dir("load");
  REQUIRE(run(dir, {"train.steps=3"}).status == kExitComplete);
  auto loaded = models::load_run(dir);
  CHECK(loaded.step == 3);
  TensorMap ck = load_safetensors((dir / "checkpoint.safetensors").string());
  for (auto& [name, t] : loaded.model->state_dict()) CHECK_MESSAGE(bitwise_equal(t, ck.at("model." + name)), name);
  CHECK(loaded.task.token(0) == "k0");
  fs::remove_all(dir);
}

TEST_CASE("run: a bad ATTNLAB_MATMUL is a usage error naming the variable, before the run directory exists") {
  const fs::path dir = fresh_dir("bad_matmul_route");
  fs::remove_all(dir);
  const std::string out = dir.string() + ".out";
  const std::string command =
      fmt::format("ATTNLAB_MATMUL=fastest '{}/attnlab' run test_resume --run-dir '{}' > '{}' 2>&1", ATTNLAB_BINARY_DIR,
                  dir.string(), out);
  const int status = std::system(command.c_str());
  CHECK((WIFEXITED(status) ? WEXITSTATUS(status) : -1) == kExitUsage);
  CHECK(read(out).find("ATTNLAB_MATMUL=\"fastest\": expected auto, openblas or onednn") != std::string::npos);
  CHECK_FALSE(fs::exists(dir));
  fs::remove(out);
}
