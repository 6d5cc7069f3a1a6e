// Data-parallel training (docs/distributed.md): the dist module without a launcher, the
// Trainer's train.accumulate and micro-batches, the batch split check, and, in a build with MPI,
// `mpirun -np K attnlab run` (K = 2, 3, 4) against one process accumulating the same K
// micro-batches. Without MPI the mpirun tests are not compiled (ATTNLAB_MPIEXEC).
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "dist/distributed.hpp"
#include "runner/run_helpers.hpp"

using namespace attnlab;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

// A small `lm` run: one layer, d = 32, context 32, global batch 4, six steps.
std::vector<std::string> tiny_lm(std::vector<std::string> more = {}) {
  std::vector<std::string> sets = {"train.steps=6",    "train.batch_size=4", "model.d_model=32",
                                   "model.layers=1",   "model.ffn_hidden=64", "task.length=32",
                                   "train.eval_every=3", "eval.batches=1",    "train.warmup=2"};
  sets.insert(sets.end(), more.begin(), more.end());
  return sets;
}

// The checkpoint tensors of the model and the optimizer whose values differ between two runs.
std::vector<std::string> differing_state(const fs::path& a, const fs::path& b) {
  const TensorMap x = checkpoint_of(a), y = checkpoint_of(b);
  std::vector<std::string> out;
  for (const auto& [name, t] : x)
    if ((name.starts_with("model.") || name.starts_with("optim.")) && (!y.count(name) || !bitwise_equal(t, y.at(name))))
      out.push_back(name);
  return out;
}

// A recall classifier whose loss takes the whole batch (tests/runner/run_helpers.hpp).
const bool registered = runner::register_experiment({
    .name = "test_unsplit",
    .description = "tests/runner: a Trainer loss that does not split its batch",
    .schema = [] {
      runner::Schema s;
      runner::add_task_keys(s, "recall");
      models::add_model_keys(s, {.d_model = 16, .layers = 1, .ffn_hidden = 32});
      runner::add_train_keys(s, {.steps = 2, .batch_size = 4});
      return s;
    }(),
    .presets = {{"quick", "task.train_size = 64\ntask.val_size = 16\ntask.test_size = 16\n"}},
    .run = [](const runner::Config& config,
              runner::RunContext& ctx) { train_classifier(config, ctx, [](int64_t, nn::Module&) {}); },
});

}  // namespace

// Without a launcher this runs on one rank; the mpirun test below also runs it on two.
TEST_CASE("dist: all_reduce_sum sums over the ranks across buckets; broadcast gives rank 0's values") {
  dist::Session session;  // starts MPI only under a launcher
  const int k = dist::world_size(), r = dist::rank();
  CHECK(dist::is_root() == (r == 0));
  // Two-float buckets: the first tensor spans two of them, the second shares one.
  Tensor a = from_vector(std::vector<float>{1.5f + float(r), -2.0f, 0.25f * float(r + 1)});
  Tensor b = from_vector(std::vector<float>{float(10 * r)});
  dist::all_reduce_sum({a, b}, 8);
  const float tri = float(k * (k - 1) / 2);  // 0 + 1 + ... + (k - 1)
  CHECK(a.to_vector<float>() == std::vector<float>{1.5f * float(k) + tri, -2.0f * float(k), 0.25f * (tri + float(k))});
  CHECK(b.to_vector<float>() == std::vector<float>{10 * tri});
  std::vector<double> v{0.5, double(r)};
  dist::all_reduce_sum(v);
  CHECK(v == std::vector<double>{0.5 * k, tri});
  CHECK(dist::broadcast(int64_t(42 + r)) == 42);
  TensorMap m;
  if (r == 0)
    m["w"] = from_vector(std::vector<int64_t>{7, 8}, {1, 2});
  else
    m["other"] = from_vector(std::vector<float>{1});
  dist::broadcast(m);
  REQUIRE(m.size() == 1);
  CHECK(m.at("w").shape() == Dims{1, 2});
  CHECK(m.at("w").to_vector<int64_t>() == std::vector<int64_t>{7, 8});
  CHECK((dist::comm_stats().calls > 0) == (k > 1));
  // Typed errors: what the all-reduce cannot sum, and a bucket smaller than one float.
  CHECK_THROWS_AS(dist::all_reduce_sum({from_vector(std::vector<double>{1.0})}), ValueError);
  CHECK_THROWS_AS(dist::all_reduce_sum({a}, 2), ValueError);
}

TEST_CASE("dist: train.accumulate = 2 trains on the mean of two half-batch gradients, close to one batch") {
  const fs::path one = fresh_run_dir("accumulate1"), two = fresh_run_dir("accumulate2");
  REQUIRE(run_in(one, "lm", tiny_lm()).status == 0);
  REQUIRE(run_in(two, "lm", tiny_lm({"train.accumulate=2"})).status == 0);
  // Each half's loss is a mean over as many tokens, so the mean of the two is the whole batch's
  // loss and only the order of the sums differs: equal to float32 rounding, not bitwise.
  const TensorMap a = checkpoint_of(one), b = checkpoint_of(two);
  int64_t compared = 0;
  for (const auto& [name, t] : a)
    // A key bias has no gradient but rounding noise (softmax ignores a shift of every logit of a
    // row), which Adam scales up to full steps: it is left out.
    if (name.starts_with("model.") && !name.ends_with("k_proj.bias")) {
      INFO(name);
      CHECK(allclose(b.at(name), t, 1e-4, 1e-5));
      ++compared;
    }
  CHECK(compared > 4);
  const auto ma = metrics_without_time(one), mb = metrics_without_time(two);
  REQUIRE(ma.size() == mb.size());
  CHECK(mb.back()["train_loss"].get<double>() == doctest::Approx(ma.back()["train_loss"].get<double>()).epsilon(1e-5));
  fs::remove_all(one);
  fs::remove_all(two);
}

TEST_CASE("dist: a global batch that does not split into the micro-batches is a usage error naming the keys") {
  const fs::path dir = fresh_run_dir("accumulate_split");
  RunResult r = run_in(dir, "lm", tiny_lm({"train.batch_size=6", "train.accumulate=4"}));
  CHECK(r.status == runner::kExitUsage);
  CHECK(r.console.find("train.batch_size = 6") != std::string::npos);
  CHECK(r.console.find("1 ranks x train.accumulate = 4") != std::string::npos);
  CHECK(!fs::exists(dir));  // refused before the run directory is created
  r = run_in(dir, "lm", tiny_lm({"train.accumulate=0"}));
  CHECK(r.status == runner::kExitUsage);
  CHECK(r.console.find("train.accumulate = 0 is out of its range [1, 65536]") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("dist: train.accumulate with a loss that ignores Trainer::micro_batch fails naming it") {
  const fs::path dir = fresh_run_dir("accumulate_unsplit");
  CHECK(run_in(dir, "test_unsplit", {"train.accumulate=2"}).status == runner::kExitFailed);
  CHECK(runner::failure_message(dir).find("Trainer::micro_batch") != std::string::npos);
  fs::remove_all(dir);
}

#ifdef ATTNLAB_MPIEXEC
namespace {

// `attnlab run lm` with the tiny config, one thread per process, under `mpirun -np ranks` when
// ranks > 0. Returns the exit status.
int attnlab_run(const fs::path& dir, int ranks, const std::vector<std::string>& sets, const std::string& suffix = "") {
  std::string command = "ATTNLAB_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";
  if (ranks > 0) command += fmt::format("'{}' --oversubscribe --allow-run-as-root -np {} ", ATTNLAB_MPIEXEC, ranks);
  command += fmt::format("'{}/attnlab' run lm --run-dir '{}'", ATTNLAB_BINARY_DIR, dir.string());
  for (const std::string& s : sets) command += " --set " + s;
  const int status = std::system((command + " > '" + dir.string() + ".out' 2>&1" + suffix).c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("dist: the collectives on two ranks") {
  const std::string command =
      fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 '{}' --oversubscribe --allow-run-as-root "
                  "-np 2 '{}/tests/test_runner' -tc='dist: all_reduce_sum sums*' > /dev/null 2>&1",
                  ATTNLAB_MPIEXEC, ATTNLAB_BINARY_DIR);
  CHECK(std::system(command.c_str()) == 0);
}

TEST_CASE("dist: mpirun -np 2 equals one process accumulating the same micro-batches, and resumes bitwise") {
  const fs::path mpi = fresh_run_dir("mpirun2"), acc = fresh_run_dir("mpirun_acc2");
  REQUIRE(attnlab_run(mpi, 2, tiny_lm()) == 0);
  REQUIRE(attnlab_run(acc, 0, tiny_lm({"train.accumulate=2"})) == 0);
  // Two ranks sum their gradients as a + b, which is b + a: the reduction order is fixed.
  CHECK(differing_state(mpi, acc).empty());
  CHECK(metrics_without_time(mpi) == metrics_without_time(acc));
  // One writer: rank 1 adds nothing to the run directory; meta.json records the ranks.
  std::set<std::string> files;
  for (const auto& entry : fs::directory_iterator(mpi)) files.insert(entry.path().filename().string());
  CHECK(files == std::set<std::string>{".lock", "checkpoint.safetensors", "config.toml", "log.txt", "meta.json",
                                       "metrics.jsonl", "summary.json"});
  const auto meta = nlohmann::json::parse(read_file(mpi / "meta.json"));
  CHECK(meta["world_size"] == 2);
  CHECK(meta["segments"][0]["world_size"] == 2);
  const auto summary = nlohmann::json::parse(read_file(mpi / "summary.json"));
  CHECK(summary["metrics"]["allreduce_bytes_per_step"].get<double>() > 4 * 17000);  // the float32 gradients

  // SIGTERM to rank 1 alone, once rank 0 has started the run: every rank stops after the next
  // reduction (exit 3, rank 0 saves the checkpoint), and the same command finishes the run.
  const fs::path stopped = fresh_run_dir("mpirun_stopped");
  const std::string signal_rank1 = fmt::format(
      " & pid=$!; i=0; while ! grep -q 'running lm' '{0}.out' 2>/dev/null && [ $i -lt 3000 ]; do sleep 0.01; "
      "i=$((i+1)); done; for p in $(pgrep -P $pid); do tr '\\0' '\\n' < /proc/$p/environ | grep -qx "
      "OMPI_COMM_WORLD_RANK=1 && kill -TERM $p; done; wait $pid",
      stopped.string());
  CHECK(attnlab_run(stopped, 2, tiny_lm(), signal_rank1) == runner::kExitStopped);
  CHECK(!fs::exists(stopped / "summary.json"));
  CHECK(fs::exists(stopped / "checkpoint.safetensors"));
  REQUIRE(attnlab_run(stopped, 2, tiny_lm()) == 0);
  CHECK(differing_state(mpi, stopped).empty());
  CHECK(metrics_without_time(mpi) == metrics_without_time(stopped));

  // A global batch of 4 does not split into 8 micro-batches: refused before anything is created.
  const fs::path bad = fresh_run_dir("mpirun_split");
  CHECK(attnlab_run(bad, 2, tiny_lm({"train.accumulate=4"})) == runner::kExitUsage);
  CHECK(read_file(bad.string() + ".out").find("does not split into 2 ranks x train.accumulate = 4") !=
        std::string::npos);
  CHECK(!fs::exists(bad));
  for (const fs::path& d : {mpi, acc, stopped, bad}) {
    fs::remove_all(d);
    fs::remove(d.string() + ".out");
  }
}

// K = 3 and 4 ranks: Open MPI sums the K gradients in a tree of its choosing and autograd in
// order, so the runs agree to float32 rounding, not bitwise (docs/distributed.md). A global batch
// of 12 splits into 3 or 4 equal micro-batches; mha without a key bias (whose gradient is zero up
// to rounding, which AdamW would scale to full steps).
TEST_CASE("dist: mpirun -np 3 and -np 4 equal one process accumulating the same micro-batches, to rounding") {
  for (int ranks : {3, 4}) {
    CAPTURE(ranks);
    const fs::path mpi = fresh_run_dir(fmt::format("mpirun{}", ranks)), acc = fresh_run_dir(fmt::format("mpirun_acc{}", ranks));
    const std::vector<std::string> sets =
        tiny_lm({"train.batch_size=12", "'model.attention=mha(heads=4,key_bias=false)'"});  // quoted for the shell
    std::vector<std::string> accumulated = sets;
    accumulated.push_back(fmt::format("train.accumulate={}", ranks));
    REQUIRE_MESSAGE(attnlab_run(mpi, ranks, sets) == 0, read_file(mpi.string() + ".out"));
    REQUIRE(attnlab_run(acc, 0, accumulated) == 0);
    const TensorMap x = checkpoint_of(mpi), y = checkpoint_of(acc);
    int64_t compared = 0;
    for (const auto& [name, t] : x) {
      if (!name.starts_with("model.")) continue;
      CAPTURE(name);
      REQUIRE(y.count(name));
      CHECK(allclose(t, y.at(name), 1e-3, 1e-4));
      ++compared;
    }
    CHECK(compared > 10);
    const auto a = metrics_without_time(mpi), b = metrics_without_time(acc);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i)
      for (const auto& [key, value] : a[i].items())
        if (value.is_number_float()) CHECK(value.get<double>() == doctest::Approx(b[i][key].get<double>()).epsilon(1e-4));
    CHECK(nlohmann::json::parse(read_file(mpi / "meta.json"))["world_size"] == ranks);
    for (const fs::path& d : {mpi, acc}) {
      fs::remove_all(d);
      fs::remove(d.string() + ".out");
    }
  }
}
#endif
