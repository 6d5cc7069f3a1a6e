// Running a sweep: every run's config resolved up front, then `attnlab run` child processes, at most `workers` at a time, each with
// cores / workers threads so that the runs together never oversubscribe the machine.
//
// Fault tolerance comes from three facts: a run directory is complete exactly when its
// summary.json exists (attnlab run writes it atomically, last); an unfinished run resumes from
// its checkpoint when the same `attnlab run` command is repeated; and the store is rebuilt from
// the run directories (INSERT OR REPLACE by run id) at every start. So the sweep itself keeps no
// state that a kill -9 could corrupt. Children get PR_SET_PDEATHSIG = SIGKILL so that they die
// with the sweep instead of running on unsupervised, and their own process group so that a
// terminal's Ctrl-C reaches them once, forwarded by the sweep, rather than twice.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "experiments/runner/config_diff.hpp"
#include "experiments/runner/dir_lock.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/store.hpp"
#include "nn/attention/registry.hpp"
#include "experiments/runner/sweep.hpp"
#include "tensor/io.hpp"
#include "experiments/runner/file_bounds.hpp"

namespace attnlab::runner {
namespace fs = std::filesystem;
namespace {

// Signals reach the loop through a self-pipe: the handler only records the signal and writes a
// byte, which wakes the poll() that waits for children.
volatile sig_atomic_t g_stop_signal = 0;
int g_wake_pipe[2] = {-1, -1};

void on_signal(int sig) {
  if (sig != SIGCHLD) g_stop_signal = sig;
  const int saved = errno;
  const char byte = 0;
  [[maybe_unused]] ssize_t n = write(g_wake_pipe[1], &byte, 1);
  errno = saved;
}

// Installs the handlers for the lifetime of one sweep and restores the previous ones after.
class SignalScope {
 public:
  SignalScope() {
    g_stop_signal = 0;
    if (pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) fail<FileError>("sweep: pipe2 failed: {}", std::strerror(errno));
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_NOCLDSTOP;  // no SA_RESTART: a signal interrupts poll()
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalScope() {
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
    close(g_wake_pipe[0]);
    close(g_wake_pipe[1]);
    g_wake_pipe[0] = g_wake_pipe[1] = -1;
  }
  void wait(int timeout_ms) const {
    pollfd p{g_wake_pipe[0], POLLIN, 0};
    if (poll(&p, 1, timeout_ms) > 0) {
      char buf[64];
      while (read(g_wake_pipe[0], buf, sizeof buf) > 0) {
      }
    }
  }

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGCHLD};
  struct sigaction old_[3];
};

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string read_file(const fs::path& p) { return read_text(p.string(), kConfigFileBound); }

// Starts `exe args...` in `run_dir` with stdout and stderr appended to run_dir/stdout.txt.
// Everything the child needs is built before fork(): between fork and exec only async-signal-safe
// calls are allowed, as the parent may have other threads (BLAS, TBB).
pid_t launch(const std::string& exe, const std::vector<std::string>& args, const fs::path& run_dir, int threads) {
  std::vector<std::string> argv_s = {"attnlab"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "ATTNLAB_NUM_THREADS=", 20) != 0) env_s.emplace_back(*e);
  env_s.push_back("ATTNLAB_NUM_THREADS=" + std::to_string(threads));
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  const std::string log = (run_dir / "stdout.txt").string();
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) fail<FileError>("sweep: fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the sweep died before prctl took effect
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL), signal(SIGCHLD, SIG_DFL);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    execve(exe.c_str(), argv.data(), envp.data());
    const char msg[] = "attnlab sweep: exec of the attnlab executable failed\n";
    [[maybe_unused]] ssize_t n = write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  return pid;
}

// Removes the temporary files (NAME.tmp.PID) that a kill -9 can leave behind an atomic write in
// a run directory; none of this sweep's children is running yet, so none is in use.
void remove_temp_files(const fs::path& run_dir) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(run_dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_regular_file() && name.find(".tmp.") != std::string::npos) fs::remove(it->path(), ec);
  }
}

// ": <message>" of a failed run's failure.json (experiment.hpp), "" without one.
std::string failure_reason(const fs::path& run_dir) {
  const std::string message = failure_message(run_dir);
  return message.empty() ? "" : ": " + message;
}

}  // namespace

Config resolve_run_config(const SweepSpec& spec, const Point& point) {
  const Experiment& e = find_experiment(spec.experiment);
  Config c(e.schema);
  if (!spec.preset.empty()) {
    auto it = e.presets.find(spec.preset);
    if (it == e.presets.end()) {
      std::vector<std::string> known;
      for (const auto& [name, text] : e.presets) known.push_back(name);
      fail<SweepError>("{}: experiment '{}' has no preset '{}' (presets: {})", spec.path, spec.experiment, spec.preset,
                       known.empty() ? "none" : fmt::format("{}", fmt::join(known, ", ")));
    }
    c.merge_toml(it->second, "preset " + spec.preset);
  }
  auto line_of_axis = [&](const std::string& key) {
    if (key == "seed") return spec.seeds_line;
    for (const auto* axes : {&spec.zip, &spec.grid})
      for (const auto& a : *axes)
        if (a.key == key) return a.line;
    return 0;
  };
  for (const auto& a : spec.set) c.set_value(a.key, a.value, fmt::format("{}:{}", spec.path, a.line));
  for (const auto& [k, v] : point) c.set_value(k, v, fmt::format("{}:{}", spec.path, line_of_axis(k)));
  return c;
}

void validate_sweep(const SweepSpec& spec, const std::vector<Point>& points) {
  const Experiment& experiment = find_experiment(spec.experiment);
  std::map<std::pair<std::string, int64_t>, std::string> built;  // (spec, d_model) -> the layer's full spec
  std::set<std::string> checked;                                 // configs (seed 0) already checked
  std::map<std::string, size_t> runs;  // each run's config, equal as values -> its first index
  for (size_t i = 0; i < points.size(); ++i) {
    const Config c = resolve_run_config(spec, points[i]);
    Config same = c;  // the config as values: a spec in its canonical (pinned) form
    if (c.schema().find("model.attention") && c.schema().find("model.d_model")) {
      const std::string attention = c.get_string("model.attention");
      const int64_t d_model = c.get_int("model.d_model");
      auto it = built.find({attention, d_model});
      if (it == built.end()) {
        try {
          it = built.emplace(std::pair{attention, d_model}, nn::make_attention(attention, d_model)->spec()).first;
        } catch (const Error& e) {
          fail<SweepError>("{}: run {} ({}): model.attention '{}' with model.d_model {} does not build: {}", spec.path,
                           i, point_label(points[i]), attention, d_model, e.what());
        }
      }
      same.set_value("model.attention", it->second, "validate_sweep");
    }
    // Values equal as values (lr 1 and 1.0, a spec with other spacing or option order, a zip pair
    // given twice) would run the same configuration twice under two names.
    if (auto [first, fresh] = runs.emplace(same.to_json(), i); !fresh)
      fail<SweepError>("{}: run {} ({}) and run {} ({}) are the same configuration: their values are equal as values "
                       "(numbers compare as numbers, attention specs as the layers they build); remove one",
                       spec.path, first->second, point_label(points[first->second]), i, point_label(points[i]));
    // What `attnlab run` checks before it creates a run directory (check_config: the experiment's
    // check and the micro-batch split of one process), once per config with the seed aside (a
    // check does not read it).
    Config unseeded = c;
    unseeded.set_value("seed", int64_t(0), "validate_sweep");
    if (!checked.insert(unseeded.to_json()).second) continue;
    try {
      check_config(experiment, c, 1);
    } catch (const Error& e) {
      fail<SweepError>("{}: run {} ({}): {}", spec.path, i, point_label(points[i]), e.what());
    }
  }
}

namespace {

// COPY_STEM.runs.jsonl beside a sweep copy: DIR/sweep.runs.jsonl for a sweep directory.
fs::path run_list_path(const fs::path& copy) { return copy.parent_path() / (copy.stem().string() + ".runs.jsonl"); }

// The points (as point_to_json text) of the runs a copy numbers, in run order: its run list, or
// the expansion of the copy when it has none.
std::vector<std::string> numbered_texts(const SweepSpec& copy_spec, const fs::path& copy) {
  std::vector<std::string> texts;
  const fs::path list = run_list_path(copy);
  if (fs::exists(list)) {
    std::istringstream in(read_file(list));
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
  } else {
    for (const Point& p : expand_sweep(copy_spec)) texts.push_back(point_to_json(p));
  }
  return texts;
}

}  // namespace

std::vector<Point> numbered_points(const SweepSpec& spec, const fs::path& copy) {
  const std::vector<Point> points = expand_sweep(spec);
  const fs::path list = run_list_path(copy);
  if (!fs::exists(list)) return points;
  std::map<std::string, const Point*> by_text;
  for (const Point& p : points) by_text.emplace(point_to_json(p), &p);
  std::vector<Point> out;
  for (const std::string& text : numbered_texts(spec, copy)) {
    auto it = by_text.find(text);
    if (it == by_text.end())
      fail<ValueError>("{}: run {} is {}, which {} does not name", list.string(), out.size(), text, copy.string());
    out.push_back(*it->second);
  }
  return out;
}

SweepPlan plan_sweep(const SweepSpec& spec, const std::vector<Point>& points, const fs::path& dir) {
  SweepPlan plan;
  const fs::path copy = dir / "sweep.toml";
  if (!fs::exists(copy)) {
    plan.points = points;
    plan.fresh = true;
    return plan;
  }
  const std::string old_text = read_file(copy);
  plan.changed = old_text != spec.text;
  if (!plan.changed && !fs::exists(run_list_path(copy))) {
    plan.points = points;
    return plan;
  }
  const SweepSpec old = parse_sweep(old_text, copy.string());
  auto refuse = [&](const std::string& what) {
    fail<SweepConflictError>("{}: {}; {} holds its runs as {} defines them: a sweep file may append configurations "
                             "and seeds and change [report] and comments, nothing else (use another --out)",
                             spec.path, what, dir.string(), copy.string());
  };
  if (old.experiment != spec.experiment)
    refuse(fmt::format("experiment '{}', but {} has '{}'", spec.experiment, copy.string(), old.experiment));
  if (axis_keys(old) != axis_keys(spec))
    refuse(fmt::format("axes {}, but {} has {}", fmt::join(axis_keys(spec), ", "), copy.string(),
                       fmt::join(axis_keys(old), ", ")));
  std::map<std::string, size_t> index;  // point text -> position in `points`
  for (size_t i = 0; i < points.size(); ++i) index.emplace(point_to_json(points[i]), i);
  std::vector<bool> numbered(points.size(), false);
  const std::vector<std::string> texts = numbered_texts(old, copy);
  for (size_t r = 0; r < texts.size(); ++r) {
    auto it = index.find(texts[r]);
    if (it == index.end()) refuse(fmt::format("run {} ({}) is not in the file", run_dir_name(int64_t(r)), texts[r]));
    const Point& p = points[it->second];
    if (plan.changed) {
      const std::string diff =
          config_differences(resolve_run_config(old, p), resolve_run_config(spec, p), copy.string(), spec.path);
      if (!diff.empty()) refuse(fmt::format("run {} ({}) would change: {}", run_dir_name(int64_t(r)), point_label(p), diff));
    }
    plan.points.push_back(p);
    numbered[it->second] = true;
  }
  for (size_t i = 0; i < points.size(); ++i)
    if (!numbered[i]) {
      plan.points.push_back(points[i]);
      ++plan.added;
    }
  return plan;
}

void record_sweep_plan(const SweepSpec& spec, const SweepPlan& plan, const fs::path& dir) {
  if (!plan.fresh && !plan.changed) return;
  const fs::path copy = dir / "sweep.toml";
  const std::vector<Point> expanded = expand_sweep(spec);
  bool in_order = expanded.size() == plan.points.size();
  for (size_t i = 0; in_order && i < expanded.size(); ++i) in_order = expanded[i] == plan.points[i];
  if (!in_order || fs::exists(run_list_path(copy))) {
    std::string list;
    for (const Point& p : plan.points) list += point_to_json(p) + "\n";
    write_text_atomic(run_list_path(copy).string(), list);
  }
  write_text_atomic(copy.string(), spec.text);
}

void dry_run_sweep(const std::string& sweep_file, std::ostream& out, const fs::path& dir) {
  const SweepSpec spec = load_sweep(sweep_file);
  const std::vector<Point> points = expand_sweep(spec);
  validate_sweep(spec, points);
  const fs::path d = dir.empty() ? default_sweep_dir(sweep_file) : dir;
  const SweepPlan plan = plan_sweep(spec, points, d);
  out << fmt::format("sweep {}: experiment {}{}, {} runs, every config valid", spec.path, spec.experiment,
                     spec.preset.empty() ? "" : fmt::format(" (preset {})", spec.preset), points.size());
  if (!plan.fresh)
    out << fmt::format("; {} numbers {} of them{}", d.string(), points.size() - plan.added,
                       plan.added ? fmt::format(", {} new", plan.added) : std::string());
  out << " (dry run: nothing launched)\n";
  const size_t first_new = plan.fresh ? plan.points.size() : plan.points.size() - plan.added;
  for (size_t i = 0; i < plan.points.size(); ++i)
    out << fmt::format("{:04d}  {}{}\n", i, point_label(plan.points[i]), i >= first_new ? ", new" : "");
}

int run_sweep(const SweepOptions& options, std::ostream& out) {
  const SweepSpec spec = load_sweep(options.sweep_file);
  validate_sweep(spec, expand_sweep(spec));
  if (options.shards < 1 || options.shard < 0 || options.shard >= options.shards)
    fail<ValueError>("sweep: --shard must be i/N with 0 <= i < N, got {}/{}", options.shard, options.shards);

  const fs::path dir = options.dir.empty() ? default_sweep_dir(options.sweep_file) : options.dir;
  fs::create_directories(dir / "runs");
  // One process per directory; the shards of a sharded sweep each hold their own lock, and every
  // run directory is locked again by its `attnlab run`.
  const DirLock lock(dir, options.wait,
                     options.shards > 1 ? fmt::format(".lock.shard-{}-of-{}", options.shard, options.shards)
                                        : std::string(DirLock::kFileName));
  // The copy and its run list pin the run numbering: runs/0003 keeps its meaning while the file
  // grows (plan_sweep).
  const SweepPlan plan = plan_sweep(spec, expand_sweep(spec), dir);
  record_sweep_plan(spec, plan, dir);
  const std::vector<Point>& points = plan.points;
  if (plan.added)
    out << fmt::format("sweep {}: {} runs added to the {} that {} numbers ({:04d} ... {:04d})\n", spec.path, plan.added,
                       points.size() - plan.added, dir.string(), points.size() - plan.added, points.size() - 1);

  const bool sharded = options.shards > 1;
  fs::path db_path = dir / "results.sqlite";
  if (sharded) {
    fs::create_directories(dir / "shards");
    db_path = dir / "shards" / fmt::format("shard-{}-of-{}.sqlite", options.shard, options.shards);
  }
  Store store(db_path);

  // This invocation's runs; the complete ones go to the store (covering a kill between a run's
  // summary.json and its insert), the others are queued.
  std::vector<int64_t> mine, queue;
  for (int64_t i = 0; i < static_cast<int64_t>(points.size()); ++i)
    if (i % options.shards == options.shard) mine.push_back(i);
  const auto stored = store.complete_ids();
  std::vector<RunRecord> missing;
  for (int64_t i : mine) {
    const fs::path rd = dir / run_dir_name(i);
    if (fs::exists(rd / "summary.json")) {
      if (!std::binary_search(stored.begin(), stored.end(), i)) missing.push_back(read_run_dir(i, rd));
    } else {
      queue.push_back(i);
    }
  }
  store.put(missing);

  // More workers than cores would oversubscribe however the threads are split.
  const int cores = options.cores > 0 ? options.cores : available_cores();
  const int workers = std::clamp(options.workers > 0 ? options.workers : spec.workers, 1, cores);
  const int threads = std::max(1, cores / workers);
  out << fmt::format("sweep {}: {} runs{}, {} complete, {} to run; {} workers x {} threads; results in {}\n", spec.path,
                     mine.size(), sharded ? fmt::format(" in shard {}/{}", options.shard, options.shards) : "",
                     mine.size() - queue.size(), queue.size(), workers, threads, db_path.string())
      << std::flush;

  SignalScope signals;
  std::map<pid_t, int64_t> running;
  std::map<pid_t, std::chrono::steady_clock::time_point> started;
  size_t next = 0, done = 0;
  double done_seconds = 0;  // wall time of the runs completed now, for the ETA
  int failed = 0, stopped = 0;
  bool forwarded = false;
  while ((next < queue.size() && !g_stop_signal) || !running.empty()) {
    while (!g_stop_signal && next < queue.size() && static_cast<int>(running.size()) < workers) {
      const int64_t i = queue[next++];
      const fs::path rd = dir / run_dir_name(i);
      fs::create_directories(rd);
      remove_temp_files(rd);
      write_text_atomic((rd / "point.json").string(), point_to_json(points[i]) + "\n");
      const pid_t pid = launch(options.executable, run_arguments(spec, points[i], rd), rd, threads);
      running[pid] = i;
      started[pid] = std::chrono::steady_clock::now();
      out << fmt::format("start {} ({}){}\n", rd.filename().string(), point_label(points[i]),
                         fs::exists(rd / "checkpoint.safetensors") ? ", resuming from its checkpoint" : "")
          << std::flush;
    }
    if (g_stop_signal && !forwarded) {
      // The runs save a checkpoint and exit 3; the sweep waits for them.
      for (const auto& [pid, i] : running) kill(pid, SIGTERM);
      forwarded = true;
      out << fmt::format("{}: stopping {} running run(s) at their next step\n", strsignal(g_stop_signal), running.size())
          << std::flush;
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      signals.wait(500);
      continue;
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    const int64_t i = it->second;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started[pid]).count();
    running.erase(it);
    started.erase(pid);
    const fs::path rd = dir / run_dir_name(i);
    const std::string name = rd.filename().string();
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 0 && fs::exists(rd / "summary.json")) {
      RunRecord record = read_run_dir(i, rd);
      ++done;
      done_seconds += secs;
      RunDone line{name, secs, "", record.metrics, queue.size() - next + running.size(), queue.size(),
                   done_seconds / double(done), workers};
      std::set<std::string> names;
      for (const auto& [metric, value] : record.metrics) names.insert(metric);
      line.metric = headline_metric(spec.report, names);
      store.put({std::move(record)});
      out << done_line(line) << "\n";
    } else if (code == 3) {
      ++stopped;
      out << fmt::format("stop  {} (checkpoint saved; run the sweep again to continue)\n", name);
    } else {
      ++failed;
      const std::string reason = WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status))
                                 : code == 0         ? std::string("exit 0 without summary.json")
                                                     : fmt::format("exit status {}{}", code, failure_reason(rd));
      store.put_failed(i, point_to_json(points[i]), reason);
      out << fmt::format("FAIL  {} ({}): {}; see {}\n", name, point_label(points[i]), reason,
                         (rd / "stdout.txt").string());
    }
    out << std::flush;
  }

  if (!sharded)
    store.export_csv(dir / "results.csv", axis_keys(spec), [&](int64_t id) { return run_start_time(dir / run_dir_name(id)); });
  out << fmt::format("sweep {}: {} run(s) completed now, {} failed, {} stopped, {} not started\n", spec.path, done,
                     failed, stopped, queue.size() - next);
  if (failed) return 1;
  return g_stop_signal || stopped || next < queue.size() ? 3 : 0;
}

namespace {

// 'text' for bash: single quotes, each ' written as '\''.
std::string shell_quote(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `path` checked for the script: no newline anywhere (it would end a comment or a command), and
// for the sweep directory, which #SBATCH lines hold in double quotes with no escapes and % expanded
// in --output, no '"' or '%' either.
const std::string& script_path(const std::string& what, const std::string& path, bool in_sbatch_line) {
  const auto bad = path.find_first_of(in_sbatch_line ? "\"%\n" : "\n");
  if (bad != std::string::npos)
    fail<ValueError>("sweep --emit-slurm: the {} '{}' holds '{}', which the job script cannot carry (allowed: any "
                     "path without {}newlines)",
                     what, path, path[bad] == '\n' ? std::string("\\n") : std::string(1, path[bad]),
                     in_sbatch_line ? "'\"', '%' and " : "");
  return path;
}

}  // namespace

std::string slurm_script(const SlurmScript& s) {
  // The bash wrapper stays the job's main process, so that it can forward Slurm's signals to the
  // sweep, wait for the runs' checkpoints, and requeue the task when the time limit is near.
  return fmt::format(
      "#!/bin/bash\n"
      "# Written by `attnlab sweep --emit-slurm`: one array task per shard of {file}.\n"
      "# Every task writes its own runs and its own shards/shard-i-of-{n}.sqlite into {out};\n"
      "# `attnlab report {out}` merges them. Resubmitting resumes: complete runs are skipped.\n"
      "# SIGTERM (scancel, scontrol requeue, preemption) reaches the sweep, whose runs save a\n"
      "# checkpoint and exit 3; a requeued task resumes them. SIGUSR1, sent {warn} s before the time\n"
      "# limit, does the same and then requeues the task (docs/sweeps.md, \"Scale-out\").\n"
      "#SBATCH --job-name=attnlab-sweep\n"
      "#SBATCH --array=0-{last}\n"
      "#SBATCH --ntasks=1\n"
      "#SBATCH --cpus-per-task={cpus}\n"
      "#SBATCH --chdir=\"{dir}\"\n"
      "#SBATCH --output=\"{dir}/shards/slurm-%A_%a.out\"\n"
      "#SBATCH --open-mode=append\n"
      "#SBATCH --requeue\n"
      "#SBATCH --signal=B:USR1@{warn}\n"
      "set -uo pipefail\n"
      "task=\"${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}\"\n"
      "note() {{ echo \"attnlab-sweep $task: $* at $(date -u +%Y-%m-%dT%H:%M:%SZ)\"; }}\n"
      "note \"shard $SLURM_ARRAY_TASK_ID/{n} on $(hostname), restart ${{SLURM_RESTART_COUNT:-0}}\"\n"
      "# --cores: Slurm's CPUs for the task, not the node's; --wait: a requeued task takes its shard's lock\n"
      "# over from its predecessor.\n"
      "{exe_q} sweep {file_q} --out {out_q} --shard \"$SLURM_ARRAY_TASK_ID/{n}\" --workers 1 \\\n"
      "  --cores \"${{SLURM_CPUS_PER_TASK:-{cpus}}}\" --wait &\n"
      "sweep=$!\n"
      "requeue=0\n"
      "trap 'trapped=1; kill -TERM \"$sweep\" 2>/dev/null' TERM\n"
      "trap 'trapped=1; requeue=1; note \"SIGUSR1 (time limit near): stopping\"; kill -TERM \"$sweep\" 2>/dev/null' USR1\n"
      "# A trapped signal makes `wait` return early: wait again until the sweep itself has exited.\n"
      "status=\n"
      "while [ -z \"$status\" ]; do\n"
      "  trapped=0\n"
      "  wait \"$sweep\"\n"
      "  rc=$?\n"
      "  if [ \"$trapped\" = 0 ]; then status=$rc; fi\n"
      "done\n"
      "note \"sweep exit status $status\"\n"
      "if [ \"$requeue\" = 1 ] && [ \"$status\" = 3 ]; then\n"
      "  note \"requeueing\"\n"
      "  scontrol requeue \"$task\"\n"
      "fi\n"
      "exit \"$status\"\n",
      fmt::arg("file", s.sweep_file), fmt::arg("out", s.dir), fmt::arg("n", s.shards), fmt::arg("last", s.shards - 1),
      fmt::arg("cpus", s.cpus_per_task), fmt::arg("warn", s.signal_seconds),
      fmt::arg("dir", script_path("sweep directory", s.dir, true)),
      fmt::arg("exe_q", shell_quote(script_path("attnlab executable", s.executable, false))),
      fmt::arg("file_q", shell_quote(script_path("sweep file", s.sweep_file, false))),
      fmt::arg("out_q", shell_quote(s.dir)));
}

std::filesystem::path emit_slurm(const SweepOptions& options, int shards, int cpus_per_task) {
  const SweepSpec spec = load_sweep(options.sweep_file);
  const std::vector<Point> points = expand_sweep(spec);
  validate_sweep(spec, points);
  if (shards < 1) fail<ValueError>("sweep --emit-slurm: --shards must be at least 1, got {}", shards);
  if (cpus_per_task < 1) fail<ValueError>("sweep --emit-slurm: --cpus-per-task must be at least 1, got {}", cpus_per_task);
  const fs::path dir = options.dir.empty() ? default_sweep_dir(options.sweep_file) : options.dir;
  // Absolute paths: a job array task may start on a node that does not share the shell's
  // working directory.
  std::error_code ec;
  std::string exe = fs::read_symlink(options.executable, ec).string();
  if (ec || exe.empty()) exe = fs::absolute(options.executable).string();
  SlurmScript script{.sweep_file = fs::absolute(options.sweep_file).string(),
                     .dir = fs::absolute(dir).lexically_normal().string(),
                     .executable = exe,
                     .shards = shards,
                     .cpus_per_task = cpus_per_task};
  if (script.dir.size() > 1 && script.dir.back() == '/') script.dir.pop_back();
  const std::string text = slurm_script(script);  // checks the paths before anything is written

  fs::create_directories(dir);
  record_sweep_plan(spec, plan_sweep(spec, points, dir), dir);
  fs::create_directories(dir / "shards");
  const fs::path path = dir / "sweep.sbatch";
  write_text_atomic(path.string(), text);
  fs::permissions(path, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);
  return path;
}

}  // namespace attnlab::runner
