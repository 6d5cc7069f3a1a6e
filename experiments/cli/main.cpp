// The attnlab command-line tool: CLI11 subcommands, one line each below. `run` and `list`
// (experiments/cli/run.hpp) drive the experiment runner; `sweep` and `report`
// (experiments/cli/sweep_commands.hpp, docs/sweeps.md) run many runs and summarise them; `analyze`
// and `viz` (experiments/cli/heads_commands.hpp) study a finished run's heads; `variants`, `inspect` and `generate`
// (experiments/cli/commands.hpp, docs/cli.md) parse their own arguments; `demo` shows the
// engine: a two-layer MLP fitted by gradient descent on generated data.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "attnlab.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/cli/heads_commands.hpp"
#include "experiments/cli/run.hpp"
#include "experiments/cli/sweep_commands.hpp"

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

// A subcommand whose arguments go unparsed to an existing run_* function (which has its own
// --help and error messages).
void add_forwarding(CLI::App& app, const char* name, const char* help, int& status,
                    int (*run)(const std::vector<std::string>&, std::ostream&, std::ostream&)) {
  auto* cmd = app.add_subcommand(name, help);
  cmd->prefix_command();  // everything after the name is passed through
  cmd->set_help_flag();   // --help goes to the command itself
  cmd->callback([cmd, run, &status] { status = run(cmd->remaining(), std::cout, std::cerr); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnlab: attention research on a from-scratch C++ autograd engine (docs/cli.md)", "attnlab"};
  app.require_subcommand(1, 1);
  int status = 0;
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);

  // One line per subcommand.
  cli::add_run_command(app, status, command_line);
  cli::add_list_command(app, status);
  cli::add_sweep_commands(app, status);  // sweep, report
  cli::add_analyze_command(app, status);
  cli::add_viz_command(app, status);
  app.add_subcommand("demo", "fit a two-layer MLP by gradient descent and print the loss falling")
      ->callback([&] { status = demo(); });
  add_forwarding(app, "variants",
                 "list the attention variants and their options; --params SPEC --d-model D lists a "
                 "layer's parameters and buffers", status, cli::run_variants);
  add_forwarding(app, "inspect",
                 "run one attention layer on tensors from a safetensors file and write its output, "
                 "attention and gradients (attnlab inspect --help)", status, cli::run_inspect);
  add_forwarding(app, "generate", "sample text from a CausalLM checkpoint (attnlab generate --help)", status,
                 cli::run_generate);
  add_forwarding(app, "explain",
                 "print a variant's forward computation step by step: shapes, FLOPs, bytes, against "
                 "dense mha (attnlab explain --help)", status, cli::run_explain);
  app.add_subcommand("version", "print the version")->callback([] { std::puts("attnlab 0.1.0"); });

  try {
    app.parse(argc, argv);
    return status;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and a hint
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnlab: %s\n", e.what());
    return 1;
  }
}
