// The input-fault classes seen from the commands (docs/cli.md, "Options"; docs/analysis.md): an
// empty option value is a usage error naming the option; analyze reads a run's files as resume
// does (an edited checkpoint step refused, summary.json not an object named, NaN weights named
// as generate names them, an unfinished run's experiment taken from meta.json); no
// nlohmann-json exception text reaches the user.
#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli.hpp"
#include "cli/lm_run.hpp"
#include "experiments/cli/heads_commands.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct MainRun {
  int status;
  std::string err;
};

// attnlab::cli::main with `args` after the program name, stderr captured.
MainRun run_main(std::vector<std::string> args) {
  args.insert(args.begin(), "attnlab");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream err;
  std::streambuf* old = std::cerr.rdbuf(err.rdbuf());
  const int status = cli::main(int(argv.size()), argv.data());
  std::cerr.rdbuf(old);
  return {status, err.str()};
}

MainRun analyze(const fs::path& run) {
  cli::AnalyzeOptions o;
  o.run_dir = run;
  o.examples = 4;
  o.maps = 0;
  std::ostringstream out, err;
  const int status = cli::run_analyze(o, out, err);
  return {status, out.str() + err.str()};
}

}  // namespace

TEST_CASE("empty values: --shard \"\" and --run-dir \"\" are usage errors naming the option") {
  const fs::path sweep = fresh_run_dir("input_faults", "empty.toml");  // the sweep file must exist
  std::ofstream(sweep) << "experiment = \"lm\"\n";
  for (const auto& [args, option] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"sweep", sweep.string(), "--shard", ""}, "--shard"},
           {{"run", "lm", "--run-dir", ""}, "--run-dir"},
           {{"analyze", ""}, "run_dir"},
       }) {
    CAPTURE(option);
    const MainRun r = run_main(args);
    CHECK(r.status == 2);
    CHECK_MESSAGE(has(r.err, "must not be empty"), r.err);
    CHECK_MESSAGE(has(r.err, option), r.err);
  }
  fs::remove(sweep);
}

TEST_CASE("analyze: an edited checkpoint step, summary.json holding [], NaN weights and an unfinished run") {
  const fs::path dir = tiny_lm_run("input_faults", "analyze");
  const fs::path ckpt = dir / "checkpoint.safetensors";
  Metadata meta;
  const TensorMap original = load_safetensors(ckpt.string(), &meta);

  // The step edited in the metadata: refused as resume refuses it.
  Metadata edited = meta;
  edited["step"] = "2";
  save_safetensors(ckpt.string(), original, edited);
  MainRun r = analyze(dir);
  CHECK(r.status == 1);
  CHECK_MESSAGE(has(r.err, ckpt.string() + ": the checkpoint's steps disagree: metadata 'step' = 2"), r.err);
  save_safetensors(ckpt.string(), original, meta);

  // summary.json that is JSON but not an object: named, without the library's text.
  const std::string summary = slurp(dir / "summary.json");
  std::ofstream(dir / "summary.json") << "[]";
  r = analyze(dir);
  CHECK(r.status == 1);
  CHECK_MESSAGE(has(r.err, (dir / "summary.json").string() + ": expected a JSON object, got a JSON array"), r.err);
  CHECK_FALSE(has(r.err, "json.exception"));

  // A NaN weight: the tensor named, as generate names it.
  TensorMap poisoned = original;
  Tensor w = full(poisoned.at("model.lm_head.weight").shape(), 0.5);
  w.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  poisoned["model.lm_head.weight"] = w;
  save_safetensors(ckpt.string(), poisoned, meta);
  std::ofstream(dir / "summary.json") << summary;
  r = analyze(dir);
  CHECK(r.status == 1);
  CHECK_MESSAGE(has(r.err, "tensor 'model.lm_head.weight' holds 1 non-finite value(s)"), r.err);
  save_safetensors(ckpt.string(), original, meta);

  // An unfinished run (no summary.json): the experiment is meta.json's.
  fs::remove(dir / "summary.json");
  r = analyze(dir);
  CHECK_MESSAGE(r.status == 0, r.err);
  CHECK(has(r.err, "has no complete summary.json"));
  CHECK(has(slurp(dir / "analysis" / "roles.md"), "Run: experiment `lm`, task `fortunes`"));
  fs::remove_all(dir);
}
