// Tutorial 9: sparse and linear attention, and what they approximate (seed 003).
// The lesson's explanation is printed as it runs (tutorial::say); --help prints the usage.
#include "experiments/tutorial/tutorial.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::say;

namespace {

void lesson() {
  say("Dense attention costs O(N^2) per head. The efficient variants change the computation:\n"
      "  - local(window=w): each query sees only keys within distance w: O(N w). Exact when w >= N-1.\n"
      "  - sparse_strided(stride=l): a local band plus every l-th key: O(N (l + N/l)).\n"
      "  - linear: softmax's exp(q.k) replaced by phi(q).phi(k), phi = elu+1: O(N dk dv). A different\n"
      "    kernel, so never exact.\n"
      "  - performer: random features whose dot product estimates exp(q.k/sqrt(dk)) without bias;\n"
      "    the error shrinks as the number of features m grows.\n"
      "All of them reuse mha's projections (same parameter names), so with the same weights the\n"
      "output error against dense mha measures the approximation itself.");
  const int64_t B = 1, N = 32, D = 16;
  manual_seed(9);
  auto dense = nn::make_attention("mha(heads=2)", D);
  dense->to(kFloat64);
  Generator gen(10);
  Tensor x = randn({B, N, D}, gen, kFloat64);  // (B, N, D)
  Tensor y = dense->forward(x).output;         // (B, N, D)
  const double scale = max(abs(y)).item();

  auto error_of = [&](const std::string& spec) {
    auto layer = nn::make_attention(spec, D);
    layer->to(kFloat64);
    tutorial::copy_shared(*dense, *layer);
    const double e = tutorial::max_abs_diff(layer->forward(x).output, y) / scale;
    fmt::print("  {:<44} relative max error {:.3e}\n", spec, e);
    return e;
  };

  tutorial::section("local attention: error against dense mha as the window grows (N = 32)");
  std::vector<double> local;
  const std::vector<int> windows = {1, 4, 8, 16, 30, 31, 40};
  for (int w : windows) local.push_back(error_of(fmt::format("local(heads=2, window={})", w)));
  check(local.front() > 1e-3, "a window of 1 is far from dense attention");
  for (size_t i = 0; i < windows.size(); ++i)
    if (windows[i] >= N - 1) check(local[i] < 1e-12, fmt::format("window {} >= N - 1 is exact", windows[i]));
  check(local[3] < local[0], "a wider window is closer to dense (window 16 beats window 1)");

  tutorial::section("strided sparse attention");
  const double strided = error_of("sparse_strided(heads=2, stride=4)");
  check(strided > 1e-3, "a fixed sparse pattern with N = 32 > stride is not dense attention");

  tutorial::section("kernel feature maps");
  const double lin = error_of("linear(heads=2)");
  check(lin > 1e-3, "linear attention (elu+1 kernel) approximates a different kernel: never exact");
  for (int m : {8, 64, 512}) error_of(fmt::format("performer(heads=2, features={})", m));
  fmt::print("(performer's error is random: it falls with m on average, see docs/attention.md)\n");
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Tutorial 9: sparse and linear attention, and what they approximate (seed 003).", lesson);
}
