// bench_lra: the shape of the Long Range Arena speed and memory table (Tay et al. 2020, table 2)
// on this machine. One attention layer, B = 1, h = 4, dk = dv = 64 (d_model = 256), forward +
// backward, every registered variant at its default options, N = 1K ... 16K; time and peak
// memory, each also as a ratio to dense `mha` at the same N.
//
// Every measurement runs in its own child process (this binary with --one), under a memory
// limit (setrlimit RLIMIT_AS) and a time limit (the parent kills it): a dense layer that runs
// out of either is reported as such instead of taking the machine down. The parent writes
// DIR/lra.md (two markdown tables), DIR/lra.json and DIR/lra_time.svg (time against N, log-log).
//
//   bench_lra [--variants mha,local,...] [--lengths 1024,2048,...] [--time-limit SECONDS]
//             [--memory-limit GIB] [--out DIR]
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attnlab.hpp"
#include "bench/bench_args.hpp"
#include "experiments/plot/svg.hpp"
#include "nn/attention/registry.hpp"
#include "tensor/allocator.hpp"
#include "tensor/io.hpp"

extern char** environ;

using namespace attnlab;

namespace {

constexpr int64_t kDModel = 256, kHeads = 4, kHeadSize = 64;
constexpr const char* kFused = "mha (fused)";

// The benchmark's spec for a variant at length N: its defaults, with the LRA head sizes where it
// has heads, and max_len = N where it has a maximum length.
std::string spec_for(const std::string& name, int64_t n) {
  const nn::VariantSchema* schema = nullptr;
  for (const auto& v : nn::variants())
    if (v.schema.name == name) schema = &v.schema;
  if (!schema) fail<ValueError>("bench_lra: unknown variant {}", name);
  auto has = [&](const char* opt) {
    return std::any_of(schema->options.begin(), schema->options.end(), [&](const auto& o) { return o.name == opt; });
  };
  std::vector<std::string> opts;
  if (has("heads")) opts.push_back(fmt::format("heads={}", kHeads));
  if (has("key_size")) opts.push_back(fmt::format("key_size={}", kHeadSize));
  if (has("value_size")) opts.push_back(fmt::format("value_size={}", kHeadSize));
  if (has("max_len")) opts.push_back(fmt::format("max_len={}", n));
  std::string s = name + "(";
  for (size_t i = 0; i < opts.size(); ++i) s += (i ? ", " : "") + opts[i];
  return s + ")";
}

// ---- child: one measurement, one JSON line on stdout ----

int run_one(const std::string& spec, int64_t n, double memory_limit_gib, bool need_weights) {
  rlimit lim{};
  lim.rlim_cur = lim.rlim_max = static_cast<rlim_t>(memory_limit_gib * double(1 << 30));
  setrlimit(RLIMIT_AS, &lim);
  try {
    manual_seed(0);
    auto layer = nn::make_attention(spec, kDModel);
    Generator gen(1);
    Tensor x = randn({1, n, kDModel}, gen).requires_grad_();
    Tensor g = randn({1, n, kDModel}, gen);
    auto step = [&] {
      Tensor y = layer->forward(x, {}, {}, false, need_weights).output;
      sum(y * g).backward();
      layer->zero_grad();
      x.set_grad({});
    };
    step();  // warm-up: caches and plans
    reset_peak_bytes();
    const int64_t base = allocator_stats().bytes_in_use;
    std::vector<double> times;
    double total = 0;
    while (times.size() < 3 && (times.empty() || total < 2.0)) {
      auto t0 = std::chrono::steady_clock::now();
      step();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      total += times.back();
    }
    std::sort(times.begin(), times.end());
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::printf("{\"status\": \"ok\", \"seconds\": %.6f, \"peak_bytes\": %lld, \"max_rss_kib\": %ld}\n",
                times[times.size() / 2], (long long)(allocator_stats().peak_bytes_in_use - base), ru.ru_maxrss);
  } catch (const std::bad_alloc&) {
    std::printf("{\"status\": \"oom\"}\n");
  } catch (const std::exception& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '"', '\'');
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::printf("{\"status\": \"error\", \"message\": \"%s\"}\n", msg.c_str());
  }
  return 0;
}

// ---- parent ----

struct Result {
  std::string status = "error";  // ok | oom | time | error
  double seconds = NAN;
  double peak_bytes = NAN;
  std::string message;
};

// Tiny reader for the child's one-line JSON: the fields we wrote ourselves.
Result parse_result(const std::string& line) {
  Result r;
  auto field = [&](const char* key) -> std::string {
    const std::string k = fmt::format("\"{}\": ", key);
    const size_t p = line.find(k);
    if (p == std::string::npos) return "";
    size_t b = p + k.size(), e = b;
    if (line[b] == '"') {
      e = line.find('"', b + 1);
      return line.substr(b + 1, e - b - 1);
    }
    while (e < line.size() && line[e] != ',' && line[e] != '}') ++e;
    return line.substr(b, e - b);
  };
  r.status = field("status");
  if (r.status.empty()) r.status = "error", r.message = "no result (crashed?)";
  if (r.status == "ok") r.seconds = std::stod(field("seconds")), r.peak_bytes = std::stod(field("peak_bytes"));
  if (r.status == "error" && r.message.empty()) r.message = field("message");
  return r;
}

// This program, resolved once at start-up: a rebuild while the benchmark runs replaces the file,
// and /proc/self/exe then names a deleted one.
std::string self_path;

Result measure(const std::string& spec, int64_t n, double time_limit, double memory_gib, bool need_weights) {
  int fds[2];
  if (pipe(fds) != 0) fail<ValueError>("bench_lra: pipe failed: {}", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  const std::string& self = self_path;
  const std::string ns = std::to_string(n), mem = fmt::format("{}", memory_gib);
  std::vector<const char*> argv = {self.c_str(), "--one", spec.c_str(), "--n", ns.c_str(), "--memory-limit", mem.c_str()};
  if (need_weights) argv.push_back("--need-weights");
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, self.c_str(), &actions, nullptr, const_cast<char**>(argv.data()), environ) != 0)
    fail<ValueError>("bench_lra: cannot start {}", self);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(time_limit);
  bool timed_out = false;
  for (;;) {
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min(left, 1.0) * 1000) + 1) > 0) {
      char buf[4096];
      const ssize_t k = read(fds[0], buf, sizeof buf);
      if (k <= 0) break;
      out.append(buf, static_cast<size_t>(k));
    }
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) return {"time", NAN, NAN, ""};
  Result r = parse_result(out);
  if (r.status == "error" && WIFSIGNALED(status)) r.message = fmt::format("killed by signal {}", WTERMSIG(status));
  return r;
}

std::string cell_time(const Result& r, const Result& dense) {
  if (r.status == "oom") return "out of memory";
  if (r.status == "time") return "out of time";
  if (r.status != "ok") return "error";
  std::string s = fmt::format("{:.0f} ms", r.seconds * 1e3);
  if (dense.status == "ok") s += fmt::format(" ({:.2f}x)", dense.seconds / r.seconds);
  return s;
}

std::string cell_memory(const Result& r, const Result& dense) {
  if (r.status != "ok") return cell_time(r, dense);
  std::string s = fmt::format("{:.0f} MiB", r.peak_bytes / double(1 << 20));
  if (dense.status == "ok") s += fmt::format(" ({:.2f}x)", r.peak_bytes / dense.peak_bytes);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> names;
  std::vector<int64_t> lengths = {1024, 2048, 4096, 8192, 16384};
  double time_limit = 120, memory_gib = 16;
  std::string out_dir = "build/bench", one_spec;
  int64_t one_n = 0;
  bool one_need_weights = false;
  CLI::App app("bench_lra: time and peak memory of every variant's forward + backward at N = 1K ... 16K, the Long "
               "Range Arena table's shape; each measurement in a child process");
  app.add_option("--variants", names, "variant names, comma-separated (default: every registered one)")->delimiter(',');
  app.add_option("--lengths", lengths, "sequence lengths, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  app.add_option("--time-limit", time_limit, "seconds one measurement may take")->check(CLI::Range(1.0, 86400.0));
  app.add_option("--memory-limit", memory_gib, "GiB one measurement may use")->check(CLI::Range(0.25, 4096.0));
  app.add_option("--out", out_dir, "directory of the tables and plots");
  // The child process's own arguments (run_child): one spec at one length.
  auto* one = app.add_option("--one", one_spec, "measure this spec only (the child process)");
  app.add_flag("--need-weights", one_need_weights, "with --one: forward with need_weights")->needs(one);
  app.add_option("--n", one_n, "with --one: the length")->needs(one)->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  bench::parse_or_exit(app, argc, argv);
  try {
    self_path = std::filesystem::read_symlink("/proc/self/exe").string();
    if (!one_spec.empty()) return run_one(one_spec, one_n, memory_gib, one_need_weights);

    if (names.empty())
      for (const auto& v : nn::variants()) names.push_back(v.schema.name);
    // The baseline first: mha asked for its probabilities, so it takes the composed path that
    // materialises the (N, N) scores, like the dense Transformer of the LRA table; every ratio is
    // against it. "mha (fused)" is the same layer on its tiled kernel.
    names.erase(std::remove(names.begin(), names.end(), "mha"), names.end());
    names.insert(names.begin(), {"mha", kFused});

    std::map<std::string, std::map<int64_t, Result>> results;
    for (int64_t n : lengths)
      for (const auto& name : names) {
        // A variant that already ran out of memory or time at a shorter length will again.
        bool skip = false;
        for (int64_t m : lengths)
          if (m < n && results[name].count(m) && (results[name][m].status == "oom" || results[name][m].status == "time"))
            skip = true, results[name][n] = results[name][m];
        if (skip) continue;
        const std::string spec = spec_for(name == kFused ? "mha" : name, n);
        std::fprintf(stderr, "bench_lra: N=%lld %s ...", (long long)n, spec.c_str());
        Result r = measure(spec, n, time_limit, memory_gib, name == "mha");
        results[name][n] = r;
        if (r.status == "ok")
          std::fprintf(stderr, " %.1f ms, %.0f MiB\n", r.seconds * 1e3, r.peak_bytes / double(1 << 20));
        else
          std::fprintf(stderr, " %s %s\n", r.status.c_str(), r.message.c_str());
      }

    std::string md = fmt::format(
        "### Long Range Arena shape: one attention layer, forward + backward\n\n"
        "B=1, h=4, dk=dv=64 (d_model=256), float32, {} thread(s), each variant at its default options "
        "(max_len = N where it has one). Limits per measurement: {:.0f} s, {:.0f} GiB. The baseline `mha` "
        "returns its probabilities, so it takes the composed path that materialises the N x N scores (the "
        "dense Transformer of the LRA table); `mha (fused)` is the same layer on its tiled kernel.\n\n",
        num_threads(), time_limit, memory_gib);
    auto table = [&](const char* title, const char* what, auto cell) {
      md += fmt::format("#### {}\n\n| variant |", title);
      for (int64_t n : lengths) md += fmt::format(" N={} |", n);
      md += "\n|---|";
      for (size_t i = 0; i < lengths.size(); ++i) md += "---:|";
      md += "\n";
      for (const auto& name : names) {
        md += fmt::format("| {} |", name);
        for (int64_t n : lengths) md += fmt::format(" {} |", cell(results[name][n], results["mha"][n]));
        md += "\n";
      }
      md += fmt::format("\n{}\n\n", what);
    };
    table("Time per forward + backward", "In parentheses: speed-up over mha at the same N (> 1 is faster).",
          cell_time);
    table("Peak memory of forward + backward",
          "Tensor storage at its peak during one step, above what was live before it (the allocator's count). "
          "In parentheses: the ratio to mha at the same N (< 1 is smaller).",
          cell_memory);
    // The cost notes each variant declares (docs/attention.md, "What every variant offers"), beside
    // the measurements.
    md += "#### Declared cost (from each variant's schema)\n\n| variant | time | memory |\n|---|---|---|\n";
    for (const auto& name : names)
      for (const auto& v : nn::variants())
        if (v.schema.name == name) md += fmt::format("| {} | {} | {} |\n", name, v.schema.time_cost, v.schema.memory_cost);
    md += "\n";
    for (const auto& name : names)
      for (int64_t n : lengths)
        if (results[name][n].status == "error")
          md += fmt::format("- {} at N={}: {}\n", name, n, results[name][n].message);

    plot::LineChart chart{"One attention layer, forward + backward", "N", "seconds", true, true, {}};
    std::string json = "[\n";
    for (const auto& name : names) {
      plot::Series s{name, {}, {}};
      for (int64_t n : lengths) {
        const Result& r = results[name][n];
        s.x.push_back(double(n));
        s.y.push_back(r.status == "ok" ? r.seconds : NAN);
        json += fmt::format("  {{\"variant\": \"{}\", \"n\": {}, \"status\": \"{}\", \"seconds\": {}, \"peak_bytes\": {}}},\n",
                            name, n, r.status, r.status == "ok" ? fmt::format("{}", r.seconds) : "null",
                            r.status == "ok" ? fmt::format("{:.0f}", r.peak_bytes) : "null");
      }
      chart.series.push_back(s);
    }
    if (json.size() > 2) json.erase(json.size() - 2, 1);  // the last comma
    json += "]\n";
    std::filesystem::create_directories(out_dir);
    write_text_atomic(out_dir + "/lra.md", md);
    write_text_atomic(out_dir + "/lra.json", json);
    plot::save_svg(out_dir + "/lra_time.svg", chart);
    std::fputs(md.c_str(), stdout);
    std::fprintf(stdout, "\nWritten: %s/lra.md, %s/lra.json, %s/lra_time.svg\n", out_dir.c_str(), out_dir.c_str(),
                 out_dir.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_lra: %s\n", e.what());
    return 1;
  }
  return 0;
}
