// `attnlab sweep` end to end, through the real executable: a sweep killed with kill -9 mid-run and
// run again loses and duplicates nothing and ends with the same numbers as an uninterrupted one;
// two shards run into one directory and merged by `attnlab report` equal an unsharded sweep.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "experiments/runner/dir_lock.hpp"
#include "experiments/runner/store.hpp"
#include "experiments/runner/sweep.hpp"
#include "helpers.hpp"
#include "tensor/io.hpp"

using namespace attnlab;
using namespace attnlab::runner;
namespace fs = std::filesystem;

namespace {

const std::string kAttnlab = ATTNLAB_BINARY_DIR "/attnlab";

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("attnlab_{}_{}", name, getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Starts `attnlab args...` with stdout and stderr going to `log`.
pid_t spawn(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> all = {kAttnlab};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : all) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1), dup2(fd, 2);
    execv(kAttnlab.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run_attnlab(const std::vector<std::string>& args, const fs::path& log) { return wait_exit(spawn(args, log)); }

// Final metrics by run id, leaving out the ones that measure time or memory.
std::map<int64_t, std::map<std::string, double>> results(const fs::path& db) {
  std::map<int64_t, std::map<std::string, double>> out;
  for (const auto& row : Store(db).runs()) {
    REQUIRE(row.status == "complete");
    for (const auto& [name, v] : row.metrics)
      if (name != "seconds" && name != "steps_per_s" && name != "peak_rss_mb") out[row.id][name] = v;
  }
  return out;
}

// Training curves by run id, "time" left out.
std::map<int64_t, std::map<std::string, std::vector<std::pair<int64_t, double>>>> curves(const fs::path& db) {
  Store s(db);
  std::map<int64_t, std::map<std::string, std::vector<std::pair<int64_t, double>>>> out;
  for (const auto& row : s.runs()) {
    out[row.id] = s.curves(row.id);
    out[row.id].erase("time");
  }
  return out;
}

// Every file of a sweep directory parses as what it claims to be; returns the number of
// temporary files (NAME.tmp.PID) left by interrupted atomic writes.
int check_files_parse(const fs::path& dir) {
  int temps = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const fs::path& p = e.path();
    const std::string name = p.filename().string();
    CAPTURE(p.string());
    if (name.find(".tmp.") != std::string::npos) {
      ++temps;
    } else if (p.extension() == ".json") {
      CHECK(nlohmann::json::accept(read(p)));
    } else if (p.extension() == ".jsonl") {
      std::istringstream lines(read(p));
      std::string line;
      while (std::getline(lines, line)) CHECK(nlohmann::json::accept(line));
      CHECK((read(p).empty() || read(p).back() == '\n'));
    } else if (p.extension() == ".toml") {
      CHECK_NOTHROW((void)toml::parse(read(p)));
    } else if (p.extension() == ".safetensors") {
      CHECK_NOTHROW((void)load_safetensors(p.string()));
    }
  }
  return temps;
}

// A sweep of 4 runs of the tiny example experiment, each long enough to be killed mid-run.
std::string sweep_file(int steps) {
  return fmt::format(R"x(experiment = "example"
workers = 2
seeds = [0, 1]
[set]
"train.steps" = {}
"train.checkpoint_every" = 10
[grid]
"train.lr" = [0.003, 0.01]
)x",
                     steps);
}

}  // namespace

TEST_CASE("sweep: kill -9 mid-run, run again: every run complete once, equal to an uninterrupted sweep") {
  const fs::path root = fresh_dir("sweep_kill");
  write_text_atomic((root / "s.toml").string(), sweep_file(300));
  const fs::path ref = root / "ref", dir = root / "killed";
  REQUIRE(run_attnlab({"sweep", (root / "s.toml").string(), "--out", ref.string()}, root / "ref.log") == 0);

  const pid_t sweep = spawn({"sweep", (root / "s.toml").string(), "--out", dir.string()}, root / "killed.log");
  // Wait until some run has saved a checkpoint and is still running, then kill the sweep.
  bool mid_run = false;
  for (int i = 0; i < 1000 && !mid_run; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (int r = 0; r < 4 && !mid_run; ++r) {
      const fs::path rd = dir / fmt::format("runs/{:04d}", r);
      mid_run = fs::exists(rd / "checkpoint.safetensors") && !fs::exists(rd / "summary.json");
    }
  }
  REQUIRE(mid_run);
  kill(sweep, SIGKILL);
  CHECK(wait_exit(sweep) == 128 + SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the runs die of PR_SET_PDEATHSIG
  int complete = 0;
  for (int r = 0; r < 4; ++r) complete += fs::exists(dir / fmt::format("runs/{:04d}/summary.json", r));
  CHECK(complete < 4);
  check_files_parse(dir);

  REQUIRE(run_attnlab({"sweep", (root / "s.toml").string(), "--out", dir.string()}, root / "killed.log") == 0);
  const std::string log = read(root / "killed.log");
  CHECK(log.find("resuming from its checkpoint") != std::string::npos);
  CHECK(check_files_parse(dir) == 0);
  for (int r = 0; r < 4; ++r) {
    std::set<int64_t> steps;
    std::istringstream lines(read(dir / fmt::format("runs/{:04d}/metrics.jsonl", r)));
    std::string line;
    while (std::getline(lines, line)) CHECK(steps.insert(nlohmann::json::parse(line)["step"].get<int64_t>()).second);
  }
  const auto got = results(dir / "results.sqlite"), want = results(ref / "results.sqlite");
  CHECK(got.size() == 4);
  CHECK(got == want);  // bitwise: resumed runs continue exactly where they stopped
  CHECK(curves(dir / "results.sqlite") == curves(ref / "results.sqlite"));
  // A third run finds nothing to do.
  CHECK(run_attnlab({"sweep", (root / "s.toml").string(), "--out", dir.string()}, root / "third.log") == 0);
  CHECK(read(root / "third.log").find("4 complete, 0 to run") != std::string::npos);
  fs::remove_all(root);
}

TEST_CASE("sweep: shards 0/2 and 1/2 into one directory, merged by report, equal an unsharded sweep") {
  const fs::path root = fresh_dir("sweep_shards");
  write_text_atomic((root / "s.toml").string(), sweep_file(20));
  const fs::path ref = root / "ref", dir = root / "sharded";
  // One worker, as in each shard: a run's thread count (cores / workers) changes the last bits of
  // its parallel reductions, so only runs with equal thread counts can be compared bitwise.
  REQUIRE(run_attnlab({"sweep", (root / "s.toml").string(), "--out", ref.string(), "--workers", "1"}, root / "log") == 0);
  const pid_t a = spawn({"sweep", (root / "s.toml").string(), "--out", dir.string(), "--shard", "0/2", "--workers", "1"},
                        root / "log");
  const pid_t b = spawn({"sweep", (root / "s.toml").string(), "--out", dir.string(), "--shard", "1/2", "--workers", "1"},
                        root / "log");
  CHECK(wait_exit(a) == 0);
  CHECK(wait_exit(b) == 0);
  CHECK(fs::exists(dir / "shards/shard-0-of-2.sqlite"));
  CHECK(fs::exists(dir / "shards/shard-1-of-2.sqlite"));
  CHECK_FALSE(fs::exists(dir / "results.sqlite"));
  CHECK(Store(dir / "shards/shard-0-of-2.sqlite").complete_ids() == std::vector<int64_t>{0, 2});
  CHECK(Store(dir / "shards/shard-1-of-2.sqlite").complete_ids() == std::vector<int64_t>{1, 3});
  REQUIRE(run_attnlab({"report", dir.string()}, root / "log") == 0);
  CHECK(results(dir / "results.sqlite") == results(ref / "results.sqlite"));
  CHECK(curves(dir / "results.sqlite") == curves(ref / "results.sqlite"));
  CHECK(fs::exists(dir / "report.md"));
  // Each run's start, for `attnlab claims` to compare with the commit that registered the
  // expectations: the last column, an ISO 8601 UTC time from the run's meta.json.
  const std::string csv = read(dir / "results.csv");
  CHECK(csv.substr(0, csv.find('\n')).ends_with(",start_time"));
  CHECK(csv.find("Z\n") != std::string::npos);

  // --emit-slurm writes a job array over the same directory and runs nothing.
  REQUIRE(run_attnlab({"sweep", (root / "s.toml").string(), "--out", dir.string(), "--emit-slurm", "--shards", "3"},
                  root / "slurm.log") == 0);
  const std::string sbatch = read(dir / "sweep.sbatch");
  CHECK(sbatch.find("#SBATCH --array=0-2") != std::string::npos);
  CHECK(sbatch.find("--shard \"$SLURM_ARRAY_TASK_ID/3\" --workers 1") != std::string::npos);
  CHECK(read(root / "slurm.log").find("sbatch ") != std::string::npos);
  // A sweep file that changes the numbered runs' config is refused with its own exit status,
  // by the sweep and its dry run alike.
  write_text_atomic((root / "s.toml").string(), sweep_file(21));
  CHECK(run_attnlab({"sweep", (root / "s.toml").string(), "--out", dir.string()}, root / "other.log") ==
        kExitSweepConflict);
  CHECK(read(root / "other.log").find("would change: 'train.steps'") != std::string::npos);
  CHECK(run_attnlab({"sweep", (root / "s.toml").string(), "--out", dir.string(), "--dry-run"}, root / "dry.log") ==
        kExitSweepConflict);
  CHECK(read(root / "dry.log").find("would change: 'train.steps'") != std::string::npos);
  // A seed appended (and a comment): the two new runs run as 0004 and 0005, the others are kept.
  std::string grown = "# a third seed\n" + sweep_file(20);
  grown.replace(grown.find("seeds = [0, 1]"), 14, "seeds = [0, 1, 2]");
  write_text_atomic((root / "s.toml").string(), grown);
  REQUIRE(run_attnlab({"sweep", (root / "s.toml").string(), "--out", dir.string(), "--workers", "1"}, root / "grow.log") == 0);
  CHECK(read(root / "grow.log").find("2 runs added to the 4 that") != std::string::npos);
  REQUIRE(run_attnlab({"report", dir.string()}, root / "log") == 0);
  CHECK(Store(dir / "results.sqlite").complete_ids() == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  CHECK(read(dir / "runs/0004/point.json").find("\"seed\":2") != std::string::npos);
  CHECK(read(dir / "runs/0001/point.json").find("\"seed\":1") != std::string::npos);
  const auto before = results(ref / "results.sqlite"), after = results(dir / "results.sqlite");
  for (int64_t id = 0; id < 4; ++id) CHECK(after.at(id) == before.at(id));  // numbered runs untouched
  fs::remove_all(root);
}

TEST_CASE("report RUN_DIR...: ad-hoc runs of `attnlab run --run-dir` compared like a sweep's") {
  const fs::path root = fresh_dir("report_runs");
  std::vector<std::string> dirs;
  for (const auto& [lr, seed] : std::vector<std::pair<std::string, int>>{{"0.003", 0}, {"0.003", 1}, {"0.01", 0}}) {
    dirs.push_back((root / fmt::format("lr{}_s{}", lr, seed)).string());
    REQUIRE(run_attnlab({"run", "example", "--set", "train.steps=20", "--set", "train.lr=" + lr, "--set",
                         fmt::format("seed={}", seed), "--run-dir", dirs.back()},
                        root / "log") == 0);
  }
  std::vector<std::string> args = {"report"};
  args.insert(args.end(), dirs.begin(), dirs.end());
  REQUIRE(run_attnlab(args, root / "log") == 0);
  const std::string md = read(root / "report/report.md");  // next to the runs by default
  CAPTURE(md);
  CHECK(md.find("# 3 runs compared") != std::string::npos);
  CHECK(md.find("| train.lr | n |") != std::string::npos);  // the one key that differs
  CHECK(md.find("| `0.003` | 2 |") != std::string::npos);   // two seeds, one row
  CHECK(md.find("| `0.01` | 1 |") != std::string::npos);
  CHECK(md.find("](plots/curve_") != std::string::npos);
  // --out elsewhere; a directory without a run is named in the error.
  REQUIRE(run_attnlab({"report", dirs[0], dirs[2], "--out", (root / "two").string()}, root / "log") == 0);
  CHECK(fs::exists(root / "two/report.md"));
  fs::create_directories(root / "empty");
  CHECK(run_attnlab({"report", dirs[0], (root / "empty").string()}, root / "err.log") != 0);
  CHECK(read(root / "err.log").find((root / "empty").string() + ": not a complete run directory") != std::string::npos);
  fs::remove_all(root);
}

TEST_CASE("lock: a second sweep or run on a held directory fails at once naming the holder's pid; --wait waits") {
  const fs::path root = fresh_dir("lock");
  write_text_atomic((root / "s.toml").string(), sweep_file(4));
  const std::string pid = std::to_string(long(getpid()));

  const fs::path sweep_dir = root / "sweep";
  fs::create_directories(sweep_dir);
  {
    const DirLock held(sweep_dir, false);
    CHECK(read(sweep_dir / ".lock") == pid + "\n");
    std::string msg;
    try {
      DirLock again(sweep_dir, false);
    } catch (const LockError& e) {
      msg = e.what();
    }
    CHECK(msg.find("in use by process " + pid) != std::string::npos);
    CHECK(run_attnlab({"sweep", (root / "s.toml").string(), "--out", sweep_dir.string()}, root / "sweep.log") == 1);
    CHECK(read(root / "sweep.log").find(sweep_dir.string() + " is in use by process " + pid) != std::string::npos);
    CHECK_FALSE(fs::exists(sweep_dir / "runs/0000"));
  }

  const fs::path run_dir = root / "run";
  fs::create_directories(run_dir);
  const std::vector<std::string> run = {"run", "example", "--set", "train.steps=4", "--run-dir", run_dir.string()};
  std::optional<DirLock> held(std::in_place, run_dir, false);
  CHECK(run_attnlab(run, root / "run.log") == 1);
  CHECK(read(root / "run.log").find(run_dir.string() + " is in use by process " + pid) != std::string::npos);
  CHECK_FALSE(fs::exists(run_dir / "config.toml"));

  std::vector<std::string> waiting = run;
  waiting.push_back("--wait");
  const pid_t child = spawn(waiting, root / "wait.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int status = 0;
  CHECK(waitpid(child, &status, WNOHANG) == 0);  // still waiting
  CHECK_FALSE(fs::exists(run_dir / "config.toml"));
  held.reset();
  CHECK(wait_exit(child) == 0);
  CHECK(fs::exists(run_dir / "summary.json"));
  CHECK(read(run_dir / ".lock") == std::to_string(long(child)) + "\n");
}

TEST_CASE("sweep --dry-run checks --shard too") {
  const fs::path root = fresh_dir("dry_shard");
  write_text_atomic((root / "s.toml").string(), sweep_file(4));
  for (std::string shard : {"2/2", "x/2", "0/0", "-1/3"}) {
    CAPTURE(shard);
    CHECK(run_attnlab({"sweep", (root / "s.toml").string(), "--dry-run", "--shard", shard}, root / "log") != 0);
    CHECK(read(root / "log").find("got '" + shard + "'") != std::string::npos);
  }
  CHECK(run_attnlab({"sweep", (root / "s.toml").string(), "--dry-run", "--shard", "1/2"}, root / "ok.log") == 0);
  fs::remove_all(root);
}
