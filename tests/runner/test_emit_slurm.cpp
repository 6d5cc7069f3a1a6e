// `attnlab sweep --emit-slurm`: the job array script's directives and quoting, and its signal
// handling run by bash as a Slurm task would run it (SLURM_* variables set, a stand-in scontrol
// on PATH). scripts/slurm/test_slurm.sh runs the same script under a real Slurm.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "experiments/runner/store.hpp"
#include "experiments/runner/sweep.hpp"
#include "runner/run_helpers.hpp"
#include "tensor/io.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

const std::string kAttnlab = ATTNLAB_BINARY_DIR "/attnlab";

fs::path make_root(const std::string& name) {
  const fs::path root = fresh_run_dir(name);
  fs::create_directories(root);
  return root;
}

void write_sweep(const fs::path& path, int steps) {
  write_text_atomic(path.string(), fmt::format("experiment = \"example\"\nseeds = [0, 1, 2]\n[set]\n"
                                               "\"train.steps\" = {}\n",
                                               steps));
}

SweepOptions options_for(const fs::path& sweep, const fs::path& dir) {
  SweepOptions o;
  o.sweep_file = sweep.string();
  o.dir = dir;
  o.executable = kAttnlab;
  return o;
}

// Runs `bash script` as array task 77_0 would run, with `extra` environment entries, output to
// `log`; a stand-in `scontrol` in root/bin appends its arguments to root/scontrol.log.
pid_t start_task(const fs::path& root, const fs::path& script, const fs::path& log,
                 const std::vector<std::string>& extra = {}) {
  fs::create_directories(root / "bin");
  const fs::path fake = root / "bin" / "scontrol";
  write_text_atomic(fake.string(), fmt::format("#!/bin/sh\necho \"$@\" >> '{}'\n", (root / "scontrol.log").string()));
  fs::permissions(fake, fs::perms::owner_all);
  std::vector<std::string> env = {"SLURM_ARRAY_JOB_ID=77", "SLURM_ARRAY_TASK_ID=0", "SLURM_CPUS_PER_TASK=1",
                                  "PATH=" + (root / "bin").string() + ":/usr/bin:/bin"};
  env.insert(env.end(), extra.begin(), extra.end());
  std::vector<std::string> args = {"/bin/bash", script.string()};
  std::vector<char*> argv, envp;
  for (auto& s : args) argv.push_back(s.data());
  for (auto& s : env) envp.push_back(s.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1), dup2(fd, 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

int exit_code(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<int64_t> logged_steps(const fs::path& run_dir) {
  std::vector<int64_t> steps;
  std::istringstream lines(read_file(run_dir / "metrics.jsonl"));
  std::string line;
  while (std::getline(lines, line)) steps.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
  return steps;
}

// Waits (at most a minute) until run_dir's metrics.jsonl has more than `lines` lines.
bool wait_for_lines(const fs::path& run_dir, size_t lines) {
  for (int i = 0; i < 6000; ++i) {
    if (fs::exists(run_dir / "metrics.jsonl") && logged_steps(run_dir).size() > lines) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("emit-slurm: directives, quoted paths, the task's own CPUs, and refused directories") {
  const fs::path root = make_root("emit_slurm_text");
  write_sweep(root / "s.toml", 20);
  const fs::path dir = root / "it's a dir";  // a quote and a space, both carried through
  const fs::path path = emit_slurm(options_for(root / "s.toml", dir), 2, 3);
  CHECK(path == dir / "sweep.sbatch");
  const std::string s = read_file(path), d = dir.string();
  CAPTURE(s);
  for (const std::string& line : std::vector<std::string>{
           "#SBATCH --array=0-1\n", "#SBATCH --cpus-per-task=3\n", "#SBATCH --requeue\n", "#SBATCH --open-mode=append\n",
        "#SBATCH --signal=B:USR1@120\n", "#SBATCH --chdir=\"" + d + "\"\n",
        "#SBATCH --output=\"" + d + "/shards/slurm-%A_%a.out\"\n"})
    CHECK_MESSAGE(s.find(line) != std::string::npos, line);
  const std::string quoted_dir = "'" + root.string() + "/it'\\''s a dir'";
  CHECK(s.find("'" + kAttnlab + "' sweep '" + (root / "s.toml").string() + "' --out " + quoted_dir +
               " --shard \"$SLURM_ARRAY_TASK_ID/2\" --workers 1 \\\n  --cores \"${SLURM_CPUS_PER_TASK:-3}\" --wait &\n") !=
        std::string::npos);
  CHECK(s.find("scontrol requeue \"$task\"") != std::string::npos);
  fs::copy_file(path, root / "copy.sbatch");  // a path the shell command below need not quote
  CHECK(std::system(("bash -n " + (root / "copy.sbatch").string()).c_str()) == 0);  // parses as bash
  CHECK(fs::exists(dir / "shards"));

  // #SBATCH lines hold the directory in double quotes, where % is expanded and " cannot be escaped.
  for (const std::string bad : {"100%", "a\"b"}) {
    const fs::path other = root / bad;
    try {
      emit_slurm(options_for(root / "s.toml", other), 2, 3);
      FAIL("no error for " << bad);
    } catch (const ValueError& e) {
      const std::string msg = e.what();
      CAPTURE(msg);
      CHECK(msg.find("sweep --emit-slurm: the sweep directory '" + other.string() + "' holds '") != std::string::npos);
      CHECK(msg.find("allowed: any path without '\"', '%' and newlines") != std::string::npos);
    }
    CHECK_FALSE(fs::exists(other / "sweep.sbatch"));
  }
  CHECK_THROWS_AS(emit_slurm(options_for(root / "s.toml", dir), 2, 0), ValueError);
  CHECK_THROWS_AS(emit_slurm(options_for(root / "s.toml", dir), 0, 1), ValueError);
  fs::remove_all(root);
}

TEST_CASE("emit-slurm: the task forwards SIGTERM, requeues itself after SIGUSR1, and resumes to one result per run") {
  const fs::path root = make_root("emit_slurm_signals");
  write_sweep(root / "s.toml", 300);
  const fs::path dir = root / "sweep", log = root / "task.log", run0 = dir / "runs/0000";
  const fs::path script = emit_slurm(options_for(root / "s.toml", dir), 2, 1);

  // SIGTERM (scancel, scontrol requeue, preemption): the run saves a checkpoint, the task exits
  // 3 and leaves the requeue to Slurm.
  pid_t task = start_task(root, script, log);
  REQUIRE(wait_for_lines(run0, 0));
  kill(task, SIGTERM);
  CHECK(exit_code(task) == 3);
  CHECK(read_file(run0 / "stdout.txt").find("checkpoint saved") != std::string::npos);
  CHECK_FALSE(fs::exists(run0 / "summary.json"));
  CHECK_FALSE(fs::exists(root / "scontrol.log"));
  CHECK(read_file(log).find("attnlab-sweep 77_0: sweep exit status 3") != std::string::npos);

  // SIGUSR1 (the time limit is near): the same stop, then `scontrol requeue` of this task.
  const size_t lines = logged_steps(run0).size();
  task = start_task(root, script, log, {"SLURM_RESTART_COUNT=1"});
  REQUIRE(wait_for_lines(run0, lines));
  kill(task, SIGUSR1);
  CHECK(exit_code(task) == 3);
  CHECK(read_file(root / "scontrol.log") == "requeue 77_0\n");
  CHECK_FALSE(fs::exists(run0 / "summary.json"));

  // The requeued task: the shard's lock is free again, the run resumes, the shard's other run
  // (0002) runs, and every step is recorded once.
  task = start_task(root, script, log, {"SLURM_RESTART_COUNT=2"});
  CHECK(exit_code(task) == 0);
  const std::string out = read_file(log);
  CAPTURE(out);
  CHECK(out.find("restart 2") != std::string::npos);
  CHECK(out.find("sweep exit status 0") != std::string::npos);
  CHECK(count(read_file(run0 / "stdout.txt"), "resuming example from step") == 2);
  std::vector<int64_t> want;
  for (int64_t step = 10; step <= 300; step += 10) want.push_back(step);
  for (const fs::path& run : {run0, dir / "runs/0002"}) {
    CHECK(fs::exists(run / "summary.json"));
    CHECK(logged_steps(run) == want);
  }
  CHECK_FALSE(fs::exists(dir / "runs/0001"));  // shard 1's
  CHECK(Store(dir / "shards/shard-0-of-2.sqlite").complete_ids() == std::vector<int64_t>{0, 2});
  CHECK(read_file(root / "scontrol.log") == "requeue 77_0\n");
  fs::remove_all(root);
}
