// The attnlab command-line tool. Until the experiment runner lands, `attnlab demo` shows the
// engine: a two-layer MLP fitted by gradient descent on generated data. `variants` and
// `inspect` (experiments/cli/commands.hpp, docs/cli.md) expose the attention registry.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "attnlab.hpp"
#include "experiments/cli/commands.hpp"

namespace {

using namespace attnlab;

int demo() {
  // Regression target y = sin(3 x0) + 0.5 x1^2 - x0 x1 on 512 random points in [-1, 1]^2.
  Generator gen(42);
  Tensor x = rand({512, 2}, gen, kFloat32, -1, 1);
  Tensor x0 = select(x, 1, 0), x1 = select(x, 1, 1);
  Tensor y = unsqueeze(sin(x0 * 3.0) + square(x1) * 0.5 - x0 * x1, 1);  // (512, 1)

  const int64_t hidden = 64;
  Tensor w1 = randn({2, hidden}, gen, kFloat32, 0, 1.0 / std::sqrt(2.0)).requires_grad_();
  Tensor b1 = zeros({hidden}).requires_grad_();
  Tensor w2 = randn({hidden, 1}, gen, kFloat32, 0, 1.0 / std::sqrt(double(hidden))).requires_grad_();
  Tensor b2 = zeros({1}).requires_grad_();
  std::vector<Tensor*> params = {&w1, &b1, &w2, &b2};

  std::printf("attnlab demo: a 2-64-1 tanh MLP fitted by gradient descent (lr 0.1, momentum 0.9)\n");
  std::vector<Tensor> velocity;
  for (Tensor* p : params) velocity.push_back(zeros_like(*p));
  const int steps = 2000;
  double first = 0, last = 0;
  for (int step = 0; step <= steps; ++step) {
    Tensor h = tanh(matmul(x, w1) + b1);  // (512, 64)
    Tensor pred = matmul(h, w2) + b2;     // (512, 1)
    Tensor loss = mean(square(pred - y));
    for (Tensor* p : params) p->set_grad(Tensor());
    loss.backward();
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        mul_(velocity[i], 0.9);
        add_(velocity[i], params[i]->grad());
        add_(*params[i], velocity[i], -0.1);
      }
    }
    last = loss.item();
    if (step == 0) first = last;
    if (step % 200 == 0) std::printf("step %5d  mse %.6f\n", step, last);
  }
  std::printf("loss fell from %.4f to %.6f (%.0fx)\n", first, last, first / last);
  return last < first / 10 ? 0 : 1;
}

void usage() {
  std::puts(
      "usage: attnlab <command>\n"
      "\n"
      "commands:\n"
      "  demo      fit a two-layer MLP by gradient descent and print the loss falling\n"
      "  variants  list the attention variants and their options; --params SPEC --d-model D\n"
      "            lists a layer's parameters and buffers\n"
      "  inspect   run one attention layer on tensors from a safetensors file and write its\n"
      "            output, attention and gradients (attnlab inspect --help)\n"
      "  generate  sample text from a CausalLM checkpoint (attnlab generate --help)\n"
      "  explain   print a variant's forward computation step by step: shapes, FLOPs, bytes,\n"
      "            against dense mha (attnlab explain --help)\n"
      "  version   print the version\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
      usage();
      return argc < 2 ? 2 : 0;
    }
    std::string cmd = argv[1];
    if (cmd == "demo") return demo();
    const std::vector<std::string> rest(argv + 2, argv + argc);
    if (cmd == "variants") return cli::run_variants(rest, std::cout, std::cerr);
    if (cmd == "inspect") return cli::run_inspect(rest, std::cout, std::cerr);
    if (cmd == "generate") return cli::run_generate(rest, std::cout, std::cerr);
    if (cmd == "explain") return cli::run_explain(rest, std::cout, std::cerr);
    if (cmd == "version") {
      std::puts("attnlab 0.1.0");
      return 0;
    }
    std::fprintf(stderr, "attnlab: unknown command '%s' (try --help)\n", cmd.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnlab: %s\n", e.what());
    return 1;
  }
}
