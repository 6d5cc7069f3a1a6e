// `attnlab inspect --mode train` on routing attention writes the centroids as updated by the
// forward call (docs/attention.md, "routing"), and eval mode writes no buffers and moves nothing.
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "experiments/cli/commands.hpp"
#include "helpers.hpp"
#include "nn/attention/registry.hpp"
#include "nn/attention/routing.hpp"

using namespace attnlab;
using namespace attnlab::testing;
namespace fs = std::filesystem;

TEST_CASE("inspect --mode train writes routing's updated buffer.centroids") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("attnlab_test_cli_routing_{}", static_cast<long>(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string spec = "routing(heads=2, clusters=3, decay=0.5)";
  manual_seed(3);
  auto layer = nn::make_attention(spec, 8);
  layer->to(kFloat64);
  const TensorMap weights = [&] {
    TensorMap w;
    for (auto& [name, t] : layer->state_dict()) w[name] = clone(t);
    return w;
  }();
  save_safetensors((dir / "w.safetensors").string(), weights);
  Generator g(4);
  Tensor x = randn({2, 6, 8}, g, kFloat64), gout = randn({2, 6, 8}, g, kFloat64);
  save_safetensors((dir / "x.safetensors").string(), {{"x", x}, {"grad_output", gout}});

  auto run = [&](const std::string& mode, const std::string& out) {
    std::ostringstream o, e;
    int status = cli::run_inspect({"--spec", spec, "--d-model", "8", "--weights", (dir / "w.safetensors").string(),
                                   "--input", (dir / "x.safetensors").string(), "--out", (dir / out).string(),
                                   "--dtype", "float64", "--mode", mode},
                                  o, e);
    INFO(e.str());
    REQUIRE(status == 0);
    return load_safetensors((dir / out).string());
  };
  TensorMap train = run("train", "train.safetensors"), eval = run("eval", "eval.safetensors");

  // The same layer run directly in train mode.
  layer->train();
  Tensor y = layer->forward(x).output;
  Tensor updated = layer->get_buffer("centroids");
  REQUIRE(train.count("buffer.centroids"));
  CHECK(allclose(train["buffer.centroids"], updated, 1e-12, 1e-14));
  CHECK_FALSE(allclose(train["buffer.centroids"], weights.at("centroids"), 1e-6, 1e-8));
  CHECK(allclose(train["output"], y, 1e-12, 1e-14));
  // The forward used the old centroids, so train and eval outputs (no dropout, no gates) agree.
  CHECK(allclose(train["output"], eval["output"], 1e-12, 1e-14));
  CHECK(allclose(train["grad.q_proj.weight"], eval["grad.q_proj.weight"], 1e-12, 1e-14));
  CHECK(eval.count("buffer.centroids") == 0);
  fs::remove_all(dir);
}
