// Fuzz target: sweep files (experiments/runner/sweep.cpp): the TOML structure, [set], [grid],
// [zip], seeds and [report] with its expectations and selectors. A sweep that parses is expanded
// (when it has at most kMaxExpand runs, to keep each execution fast) and every point is written
// as JSON and as a label; the JSON must parse.
#include <nlohmann/json.hpp>

#include "experiments/runner/sweep.hpp"
#include "fuzz/fuzz_common.hpp"

using namespace attnlab;

namespace {
constexpr size_t kMaxExpand = 256;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded("fuzz_sweep", [&] {
    const runner::SweepSpec spec = runner::parse_sweep(std::string(fuzz::as_text(data, size)), "fuzz.toml");
    size_t runs = spec.seeds.size() * (spec.zip.empty() ? 1 : spec.zip.front().values.size());
    for (const auto& a : spec.grid) {
      runs *= a.values.size();
      if (runs > kMaxExpand) return;
    }
    if (runs > kMaxExpand) return;
    const auto points = runner::expand_sweep(spec);
    fuzz::require(points.size() == runs, "fuzz_sweep", "expand_sweep gives another number of runs");
    for (const auto& p : points) {
      fuzz::require(nlohmann::json::accept(runner::point_to_json(p)), "fuzz_sweep", "point_to_json is not JSON");
      (void)runner::point_label(p);
    }
  });
}
