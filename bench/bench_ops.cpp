// bench_ops: attnlab's half of `make bench` (bench/run.sh runs it next to bench/torch_ops.py,
// which does the same work in PyTorch, and joins both into one table).
//
// It measures, on the thread count attnlab was given (ATTNLAB_NUM_THREADS, else every core):
//   1. matmul GFLOP/s, square and batched, against OpenBLAS's cblas_sgemm called directly from
//      this process with OpenBLAS set to the same thread count;
//   2. elementwise ops, reductions and softmax on 2048 x 2048 floats, in GB/s;
//   3. the per-op cost of forward + backward on 4-element tensors (pure framework overhead);
//   4. steps/s of a small MLP training step (784-256-256-10, batch 64, SGD);
//   5. system allocations per steady-state training step (the caching allocator's counter).
// Output: one JSON object on stdout (the rows of the report; torch's numbers are filled in by
// run.sh from `torch_key`). Progress goes to stderr.
//
// Timing, the same in torch_ops.py: warm up for a while, pick an inner iteration count so one
// repetition lasts at least --min-time seconds, report the median over --reps repetitions.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <cblas.h>
#include <fmt/format.h>

#include "attnlab.hpp"
#include "bench/bench_args.hpp"

namespace {

using namespace attnlab;
using Clock = std::chrono::steady_clock;

struct Options {
  int reps = 9;
  double min_time = 0.05;  // seconds per repetition
  double warmup = 0.15;    // seconds of warm-up calls before calibrating
  std::string only;        // run one group only (matmul, elementwise, overhead, mlp)
};
Options opt;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using attnlab::bench::median;

// Runs f during the warm-up and returns how many calls make one repetition of >= min_time.
template <class F>
int64_t calibrate(F& f) {
  f();  // first call: lazy initialisation, page faults, cache fill
  auto t0 = Clock::now();
  int64_t calls = 0;
  do {
    f();
    ++calls;
  } while (since(t0) < opt.warmup);
  double per_call = since(t0) / calls;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(opt.min_time / per_call)));
}

// Seconds per call of each of `n` repetitions of `iters` calls.
template <class F>
void repeat(F& f, int64_t iters, int n, std::vector<double>* out) {
  for (int r = 0; r < n; ++r) {
    auto t0 = Clock::now();
    for (int64_t i = 0; i < iters; ++i) f();
    out->push_back(since(t0) / iters);
  }
}

// Median seconds per call of f.
template <class F>
double time_op(F&& f) {
  int64_t iters = calibrate(f);
  std::vector<double> t;
  repeat(f, iters, opt.reps, &t);
  return median(t);
}

// Idle worker threads of OpenBLAS and oneTBB spin for a while before they sleep; a pause
// between the two libraries keeps one's spinning threads from stealing the other's cores.
void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(120)); }

// Median seconds per call of a and of b, measured in alternating blocks so that a change of
// machine load during the run hits both alike. `enter_b`/`leave_b` bracket every use of b.
template <class FA, class FB, class Enter, class Leave>
std::pair<double, double> time_pair(FA&& a, FB&& b, Enter enter_b, Leave leave_b) {
  constexpr int kBlocks = 3;
  const int per_block = (opt.reps + kBlocks - 1) / kBlocks;
  int64_t ia = calibrate(a);
  settle();
  enter_b();
  int64_t ib = calibrate(b);
  leave_b();
  settle();
  std::vector<double> ta, tb;
  for (int blk = 0; blk < kBlocks; ++blk) {
    repeat(a, ia, per_block, &ta);
    settle();
    enter_b();
    repeat(b, ib, per_block, &tb);
    leave_b();
    settle();
  }
  return {median(ta), median(tb)};
}

// ---- the report rows ----
struct Row {
  std::string group, label, unit;
  double attnlab = 0;
  bool higher_is_better = true;
  std::string ref_name;              // "OpenBLAS", "torch" or "" (no reference)
  std::optional<double> ref;         // known here (OpenBLAS), else filled in from torch_key
  std::string torch_key;             // key into torch_ops.py's "results"
  std::optional<double> min_ratio;   // target: speed-up of attnlab over the reference
  std::optional<double> max_value;   // target on attnlab's own value (no reference)

  Row(std::string group, std::string label, std::string unit, double value, bool higher_is_better = true)
      : group(std::move(group)), label(std::move(label)), unit(std::move(unit)), attnlab(value),
        higher_is_better(higher_is_better) {}
  Row& openblas(double v) { ref_name = "OpenBLAS"; ref = v; return *this; }
  // torch's number comes from torch_ops.py; when OpenBLAS is the reference it is shown for information.
  Row& torch(std::string key) {
    if (ref_name.empty()) ref_name = "torch";
    torch_key = std::move(key);
    return *this;
  }
  Row& at_least(double ratio) { min_ratio = ratio; return *this; }
  Row& at_most(double value) { max_value = value; return *this; }
};
std::vector<Row> rows;

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}
std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

void print_json(int threads) {
  std::printf("{\n  \"threads\": %d,\n  \"blas\": %s,\n  \"rows\": [\n", threads,
              json_str(openblas_get_config()).c_str());
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::printf(
        "    {\"group\": %s, \"label\": %s, \"unit\": %s, \"higher_is_better\": %s, \"attnlab\": %s, "
        "\"ref_name\": %s, \"ref\": %s, \"torch_key\": %s, \"min_ratio\": %s, \"max_value\": %s}%s\n",
        json_str(r.group).c_str(), json_str(r.label).c_str(), json_str(r.unit).c_str(),
        r.higher_is_better ? "true" : "false", json_num(r.attnlab).c_str(), json_str(r.ref_name).c_str(),
        r.ref ? json_num(*r.ref).c_str() : "null", r.torch_key.empty() ? "null" : json_str(r.torch_key).c_str(),
        r.min_ratio ? json_num(*r.min_ratio).c_str() : "null", r.max_value ? json_num(*r.max_value).c_str() : "null",
        i + 1 < rows.size() ? "," : "");
  }
  std::printf("  ]\n}\n");
}

bool wanted(const char* group) { return opt.only.empty() || opt.only == group; }
void progress(const Row& r) {
  std::fprintf(stderr, "  %-44s %10.3f %s%s\n", r.label.c_str(), r.attnlab, r.unit.c_str(),
               r.ref ? (" (" + r.ref_name + " " + json_num(*r.ref) + ")").c_str() : "");
}
void add_row(Row r) {
  progress(r);
  rows.push_back(std::move(r));
}

// ---- 1. matrix products ----
void bench_matmul(int threads) {
  Generator gen(1);
  const int saved_blas_threads = openblas_get_num_threads();  // attnlab keeps it at 1
  auto enter = [&] { openblas_set_num_threads(threads); };
  auto leave = [&] { openblas_set_num_threads(saved_blas_threads); };

  for (int64_t n : {256, 512, 1024, 2048}) {
    Tensor a = randn({n, n}, gen), b = randn({n, n}, gen), c = empty({n, n});
    const float *pa = a.data<float>(), *pb = b.data<float>();
    float* pc = c.data<float>();
    auto ours = [&] { Tensor out = matmul(a, b); };
    auto blas = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, pa, n, pb, n, 0.0f, pc, n);
    };
    auto [ta, tb] = time_pair(ours, blas, enter, leave);
    const double gflop = 2.0 * n * n * n / 1e9;
    add_row(Row("matmul", fmt::format("matmul {0}x{0} @ {0}x{0}", n), "GFLOP/s", gflop / ta)
                .openblas(gflop / tb)
                .torch(fmt::format("matmul_{}", n))
                .at_least(0.95));
  }

  // The MLP's largest products: a linear layer's forward pass, (64, 784) @ (784, 256), and its
  // weight gradient x^T @ g, (784, 64) @ (64, 256) with x^T a transposed view. Few rows and
  // many columns, or a short inner dim: the shapes where splitting the work matters.
  struct Skinny {
    const char* label;
    int64_t M, K, N;
    bool trans_a;
  };
  for (Skinny s : {Skinny{"linear forward (64x784 @ 784x256)", 64, 784, 256, false},
                   Skinny{"weight gradient (784x64 @ 64x256), x^T view", 784, 64, 256, true}}) {
    // a holds the stored matrix: (M, K) or, for trans_a, (K, M) read through a transposed view.
    Tensor a = s.trans_a ? randn({s.K, s.M}, gen) : randn({s.M, s.K}, gen);
    Tensor av = s.trans_a ? transpose(a, 0, 1) : a;
    Tensor b = randn({s.K, s.N}, gen), c = empty({s.M, s.N});
    const float *pa = a.data<float>(), *pb = b.data<float>();
    float* pc = c.data<float>();
    auto ours = [&] { Tensor out = matmul(av, b); };
    auto blas = [&] {
      cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, s.M, s.N, s.K, 1.0f, pa,
                  s.trans_a ? s.M : s.K, pb, s.N, 0.0f, pc, s.N);
    };
    auto [ta, tb] = time_pair(ours, blas, enter, leave);
    const double gflop = 2.0 * s.M * s.N * s.K / 1e9;
    add_row(Row("matmul", s.label, "GFLOP/s", gflop / ta).openblas(gflop / tb).at_least(0.95));
  }

  // 64 independent (128 x 64) @ (64 x 128) products, as in multi-head attention scores.
  const int64_t B = 64, M = 128, K = 64, N = 128;
  Tensor a = randn({B, M, K}, gen), b = randn({B, K, N}, gen), c = empty({B, M, N});
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float* pc = c.data<float>();
  auto ours = [&] { Tensor out = matmul(a, b); };
  auto blas = [&] {
    for (int64_t i = 0; i < B; ++i)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, pa + i * M * K, K, pb + i * K * N, N,
                  0.0f, pc + i * M * N, N);
  };
  auto [ta, tb] = time_pair(ours, blas, enter, leave);
  const double gflop = 2.0 * B * M * N * K / 1e9;
  add_row(Row("matmul", "batched matmul 64 x (128x64 @ 64x128)", "GFLOP/s", gflop / ta)
              .openblas(gflop / tb)
              .torch("bmm_64_128_64_128")
              .at_least(0.95));
}

// ---- 2. elementwise, reductions, softmax ----
void bench_elementwise() {
  Generator gen(2);
  const int64_t R = 2048, C = 2048;   // 4M floats, 16 MB per tensor
  const double n = double(R * C), f = sizeof(float);
  Tensor x = randn({R, C}, gen), y = randn({R, C}, gen), bias = randn({C}, gen);
  struct Case {
    const char* key;
    const char* label;
    double bytes;  // bytes read + written, by the same formula in torch_ops.py
    std::function<Tensor()> run;
  };
  std::vector<Case> cases = {
      {"add_bcast", "add, broadcast (2048x2048 + 2048)", 2 * n * f, [&] { return add(x, bias); }},
      {"mul", "mul (2048x2048 * 2048x2048)", 3 * n * f, [&] { return mul(x, y); }},
      {"exp", "exp (2048x2048)", 2 * n * f, [&] { return exp(x); }},
      {"gelu", "gelu, erf form (2048x2048)", 2 * n * f, [&] { return gelu(x); }},
      {"sum_last", "sum over last dim (2048x2048 -> 2048)", n * f, [&] { return sum(x, {1}); }},
      {"sum_first", "sum over first dim (2048x2048 -> 2048)", n * f, [&] { return sum(x, {0}); }},
      {"softmax_last", "softmax over last dim (2048x2048)", 2 * n * f, [&] { return softmax(x, 1); }},
  };
  for (Case& c : cases) {
    double t = time_op([&] { Tensor out = c.run(); });
    add_row(Row("elementwise", c.label, "GB/s", c.bytes / t / 1e9).torch(c.key).at_least(1.0));
  }
}

// ---- 3. per-op overhead on tiny tensors ----
void bench_overhead() {
  Generator gen(3);
  Tensor a = randn({4}, gen).requires_grad_(), b = randn({4}, gen).requires_grad_(),
         c = randn({4}, gen).requires_grad_();
  // Three recorded ops (mul, add, sum), then backward through them into the leaves' .grad.
  double t = time_op([&] {
    Tensor loss = sum(add(mul(a, b), c));
    loss.backward();
  });
  add_row(Row("overhead", "tiny ops, forward + backward: ((a*b)+c).sum(), 4 floats", "us/op", t / 3 * 1e6, false)
              .torch("tiny_fwd_bwd_per_op")
              .at_least(5.0));

  Tensor p = randn({4}, gen), q = randn({4}, gen);
  double t2 = time_op([&] { Tensor out = add(p, q); });
  add_row(Row("overhead", "tiny op, no autograd: a + b, 4 floats", "us/op", t2 * 1e6, false).torch("tiny_add_nograd"));
}

// ---- 4 and 5. MLP training step, allocations per step ----
struct Mlp {
  Tensor x, labels;                 // (64, 784), (64, 1) int64
  std::vector<Tensor> params;       // w1 (784, 256), b1 (256), w2 (256, 256), b2, w3 (256, 10), b3
  double lr = 0.01;

  Mlp() {
    Generator gen(4);
    const int64_t batch = 64, sizes[] = {784, 256, 256, 10};
    x = randn({batch, sizes[0]}, gen);
    labels = randint(0, sizes[3], {batch, 1}, gen);
    for (int l = 0; l < 3; ++l) {
      params.push_back(randn({sizes[l], sizes[l + 1]}, gen, kFloat32, 0, 1.0 / std::sqrt(double(sizes[l]))));
      params.push_back(zeros({sizes[l + 1]}));
    }
    for (Tensor& p : params) p.requires_grad_();
  }

  void step() {
    Tensor h1 = relu(matmul(x, params[0]) + params[1]);        // (64, 256)
    Tensor h2 = relu(matmul(h1, params[2]) + params[3]);       // (64, 256)
    Tensor logits = matmul(h2, params[4]) + params[5];         // (64, 10)
    Tensor loss = -mean(gather(log_softmax(logits, 1), 1, labels));  // cross-entropy
    for (Tensor& p : params) p.set_grad(Tensor());
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor& p : params) add_(p, p.grad(), -lr);
  }
};

void bench_mlp() {
  Mlp mlp;
  double t = time_op([&] { mlp.step(); });
  add_row(Row("mlp", "MLP training step (64 x 784-256-256-10, SGD)", "steps/s", 1.0 / t).torch("mlp_step").at_least(1.5));

  // Steady state reached by now: count what 100 more steps take from the system allocator.
  const int steps = 100;
  AllocatorStats s0 = allocator_stats();
  for (int i = 0; i < steps; ++i) mlp.step();
  AllocatorStats s1 = allocator_stats();
  add_row(Row("alloc", "system allocations per training step (tensor storage)", "allocs/step",
              double(s1.system_allocs - s0.system_allocs) / steps, false)
              .at_most(0));
  add_row(Row("alloc", "allocator cache hits per training step (for scale)", "hits/step",
              double(s1.cache_hits - s0.cache_hits) / steps, false));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("bench_ops: attnlab's side of `make bench` (bench/run.sh). Threads: ATTNLAB_NUM_THREADS (default: all "
               "cores).");
  app.add_option("--reps", opt.reps, "repetitions of each measurement")->check(CLI::Range(1, 100000));
  app.add_option("--min-time", opt.min_time, "seconds each repetition runs at least")->check(CLI::Range(0.0, 3600.0));
  app.add_option("--warmup", opt.warmup, "seconds of warm-up before each measurement")->check(CLI::Range(0.0, 3600.0));
  app.add_option("--only", opt.only, "one group")->check(CLI::IsMember({"matmul", "elementwise", "overhead", "mlp"}));
  bench::parse_or_exit(app, argc, argv);
  try {
    const int threads = num_threads();  // also pins OpenBLAS to 1 thread inside attnlab
    std::fprintf(stderr, "bench_ops: %d thread(s), %s\n", threads, openblas_get_config());
    // settle() after each group: OpenBLAS and TBB threads left spinning would slow the next.
    if (wanted("matmul")) {
      bench_matmul(threads);
      settle();
    }
    if (wanted("elementwise")) {
      bench_elementwise();
      settle();
    }
    if (wanted("overhead")) {
      bench_overhead();
      settle();
    }
    if (wanted("mlp")) bench_mlp();
    print_json(threads);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
