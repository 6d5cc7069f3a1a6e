// `attnlab generate` on the runner's own lm runs (models::load_lm_run): a run directory or its
// checkpoint.safetensors, the tokenizer from the run's task, and a checkpoint that does not fit
// the run's config.toml refused with the tensor named.
#include <filesystem>
#include <limits>
#include <fstream>
#include <sstream>

#include "cli/command_run.hpp"
#include "experiments/models/models.hpp"
#include "experiments/cli/commands.hpp"
#include "helpers.hpp"
#include "cli/lm_run.hpp"

using namespace attnlab;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

CommandRun generate(const std::vector<std::string>& args) { return run_command(cli::run_generate, args); }

fs::path tiny_lm_run(const std::string& name) { return testing::tiny_lm_run("generate_run", name); }

}  // namespace

TEST_CASE("generate: samples text from an lm run directory and from its checkpoint file alike") {
  const fs::path dir = tiny_lm_run("ok");
  CommandRun from_dir = generate({"--checkpoint", dir.string(), "--prompt", "The ", "--tokens", "10", "--seed", "3"});
  REQUIRE_MESSAGE(from_dir.status == 0, from_dir.err);
  CHECK(from_dir.out.rfind("The ", 0) == 0);  // text, not ids: the run's tokenizer
  CHECK(from_dir.out.size() == 4 + 10 + 1);    // prompt, 10 characters, newline
  CommandRun from_file = generate({"--checkpoint", (dir / "checkpoint.safetensors").string(), "--prompt", "The ",
                                   "--tokens", "10", "--seed", "3", "--no-cache"});
  REQUIRE_MESSAGE(from_file.status == 0, from_file.err);
  CHECK(from_file.out == from_dir.out);  // same weights, same seed, cache or not

  nn::LoadedLM lm = models::load_lm_run(dir);
  CHECK(lm.model->config.max_len == 24);
  CHECK(lm.model->config.block.d_model == 16);
  CHECK(lm.metadata.at("step") == "3");
  CHECK(lm.metadata.at("tokenizer.bytes").size() == size_t(2 * lm.model->config.vocab_size));
  fs::remove_all(dir);
}

TEST_CASE("generate: a run whose config.toml does not fit its checkpoint is refused, naming the tensor") {
  const fs::path dir = tiny_lm_run("misfit");
  edit_config(dir, "d_model = 16", "d_model = 32");
  CommandRun wide = generate({"--checkpoint", dir.string(), "--tokens", "5"});
  CHECK(wide.status == 1);
  CHECK(wide.err.find("'model.tok_emb.weight' has shape") != std::string::npos);
  CHECK(wide.err.find("model.d_model 32") != std::string::npos);
  edit_config(dir, "d_model = 32", "d_model = 16");
  edit_config(dir, "layers = 1", "layers = 2");
  CommandRun deep = generate({"--checkpoint", dir.string(), "--tokens", "5"});
  CHECK(deep.status == 1);
  CHECK(deep.err.find("holds 1 blocks, but the run's config.toml gives model.layers = 2") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("generate: a run whose checkpoint holds a non-finite weight is refused, naming the tensor") {
  const fs::path dir = tiny_lm_run("nan");
  const std::string file = (dir / "checkpoint.safetensors").string();
  Metadata meta;
  TensorMap state = load_safetensors(file, &meta);
  Tensor w = state.at("model.tok_emb.weight");
  REQUIRE(w.dtype() == kFloat32);
  w.data<float>()[3] = -std::numeric_limits<float>::infinity();
  save_safetensors(file, state, meta);
  CommandRun bad = generate({"--checkpoint", dir.string(), "--tokens", "5"});
  CHECK(bad.status == 1);
  CHECK(bad.err.find("tensor 'model.tok_emb.weight' holds 1 non-finite value(s) (the first, -inf, at flat index 3)") !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("generate: a classifier run or a plain directory is a clear error, not a crash") {
  const fs::path dir = fresh_run_dir("generate_run", "classifier");
  REQUIRE(run_catalog("example", dir, {"train.steps=2"}, {}) == 0);
  CommandRun classifier = generate({"--checkpoint", dir.string()});
  CHECK(classifier.status == 1);
  CHECK(classifier.err.find("not language modelling") != std::string::npos);
  fs::remove_all(dir);

  const fs::path plain = fresh_run_dir("generate_run", "plain");
  fs::create_directories(plain);
  CommandRun not_run = generate({"--checkpoint", plain.string()});
  CHECK(not_run.status == 1);
  CHECK(not_run.err.find("not a run directory") != std::string::npos);
  fs::remove_all(plain);
}
