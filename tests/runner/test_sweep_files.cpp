// The committed sweep files (experiments/sweeps/**/*.toml) and `attnlab sweep --dry-run`: every
// committed file must expand and resolve every run's config (attention specs built), so a
// reproduction whose sweep file no longer matches its experiment breaks the tests, not a run.
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "experiments/runner/sweep.hpp"
#include "helpers.hpp"
#include "runner/scratch_dir.hpp"
#include "tensor/io.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using attnlab::testing::error_of;
using attnlab::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

// The text of `attnlab sweep FILE --dry-run`, or "error: ..." when it throws.
std::string dry_run(const fs::path& file) {
  std::ostringstream out;
  const std::string err = error_of([&] { dry_run_sweep(file.string(), out); });
  return err.empty() ? out.str() : "error: " + err;
}

}  // namespace

TEST_CASE("every committed sweep file expands and resolves every run's config") {
  const fs::path root = fs::path(ATTNLAB_SOURCE_DIR) / "experiments" / "sweeps";
  std::vector<fs::path> files;
  if (fs::is_directory(root))
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() && e.path().extension() == ".toml") files.push_back(e.path());
  MESSAGE(files.size() << " sweep file(s) under " << root.string());
  for (const auto& f : files) {
    std::string error;
    size_t runs = 0;
    error = error_of([&] {
      const SweepSpec spec = load_sweep(f.string());
      const auto points = expand_sweep(spec);
      validate_sweep(spec, points);
      runs = points.size();
    });
    CHECK_MESSAGE(error.empty(), f.string() << ": " << error);
    CHECK_MESSAGE(runs > 0, f.string() << " expands to no run");
  }
}

TEST_CASE("sweep --dry-run: one line per run in expansion order, nothing launched or written") {
  ScratchDir tmp("sweep_files");
  const fs::path file = tmp.path / "two.toml";
  write_text_atomic(file.string(), "experiment = \"classify\"\nseeds = [0, 1]\n"
                                   "[grid]\n\"model.attention\" = [\"mha(heads=2)\", \"local(window=4, heads=2)\"]\n");
  const std::string out = dry_run(file);
  CHECK(out.find("4 runs, every config valid") != std::string::npos);
  CHECK(out.find("0000  model.attention=mha(heads=2), seed=0\n") != std::string::npos);
  CHECK(out.find("0001  model.attention=mha(heads=2), seed=1\n") != std::string::npos);
  CHECK(out.find("0003  model.attention=local(window=4, heads=2), seed=1\n") != std::string::npos);
  CHECK(out.find("0004") == std::string::npos);
  // Nothing but the sweep file: no sweep directory, no database.
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path)) ++entries;
  CHECK(entries == 1);
  CHECK_FALSE(fs::exists(default_sweep_dir(file.string())));
}

TEST_CASE("sweep --dry-run: a bad key or an attention spec that does not build is an error naming file and run") {
  ScratchDir tmp("sweep_files");
  const fs::path bad_key = tmp.path / "bad_key.toml";
  write_text_atomic(bad_key.string(), "experiment = \"classify\"\n[grid]\n\"model.atention\" = [\"mha\"]\n");
  const std::string key_error = dry_run(bad_key);
  CHECK(key_error.rfind("error: ", 0) == 0);
  CHECK(key_error.find("model.atention") != std::string::npos);
  CHECK(key_error.find("model.attention") != std::string::npos);  // the suggestion

  const fs::path bad_spec = tmp.path / "bad_spec.toml";
  write_text_atomic(bad_spec.string(), "experiment = \"classify\"\n[set]\n\"model.d_model\" = 32\n[grid]\n"
                                       "\"model.attention\" = [\"mha(heads=4)\", \"local(hedas=4)\"]\n");
  const std::string spec_error = dry_run(bad_spec);
  CHECK(spec_error.rfind("error: ", 0) == 0);
  CHECK(spec_error.find("bad_spec.toml") != std::string::npos);
  CHECK(spec_error.find("run 1") != std::string::npos);
  CHECK(spec_error.find("local(hedas=4)") != std::string::npos);
  CHECK(spec_error.find("hedas") != std::string::npos);

  // d_model not divisible by the heads: resolves as a config, fails as a layer.
  const fs::path bad_width = tmp.path / "bad_width.toml";
  write_text_atomic(bad_width.string(), "experiment = \"classify\"\n[grid]\n\"model.d_model\" = [64, 30]\n"
                                        "[set]\n\"model.attention\" = \"mha(heads=4)\"\n");
  const std::string width_error = dry_run(bad_width);
  CHECK(width_error.find("run 1") != std::string::npos);
  CHECK(width_error.find("model.d_model 30") != std::string::npos);
}
