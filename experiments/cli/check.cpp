// `attnlab check` (experiments/cli/check.hpp): prints check_variant's results as
//   PASS  shape             output (B, N, D), finite: ...
// and a closing line with the counts.
#include "experiments/cli/check.hpp"

#include <algorithm>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "experiments/check/conformance.hpp"
#include "experiments/cli/commands.hpp"
#include "nn/attention/registry.hpp"
#include "tensor/error.hpp"

namespace attnlab::cli {

int run_check(const CheckCommandOptions& options, std::ostream& out, std::ostream& err) {
  const auto& names = check::check_names();
  for (const std::string& s : options.skip)
    if (std::find(names.begin() + 1, names.end(), s) == names.end()) {
      err << fmt::format("{} check: --skip {}: not a check (checks: {})\n", program_name(), s,
                         fmt::join(names.begin() + 1, names.end(), ", "));
      return 2;
    }
  check::CheckOptions o;
  o.d_model = options.d_model;
  o.lengths = options.lengths;
  o.skip.insert(options.skip.begin(), options.skip.end());
  std::vector<check::CheckResult> results;
  try {
    results = check::check_variant(options.spec, o);
  } catch (const Error& e) {
    err << program_name() << " check: " << e.what() << "\n";
    return 2;
  }
  int passed = 0, failed = 0, skipped = 0;
  for (const auto& r : results) {
    const char* status = r.skipped ? "SKIP" : r.passed ? "PASS" : "FAIL";
    out << fmt::format("{}  {:<16}  {}\n", status, r.name, r.detail);
    (r.skipped ? skipped : r.passed ? passed : failed) += 1;
  }
  out << fmt::format("{}: {} checks passed, {} failed, {} skipped\n", options.spec, passed, failed, skipped);
  return failed ? 1 : 0;
}

void add_check_command(CLI::App& app, int& status) {
  auto o = std::make_shared<CheckCommandOptions>();
  auto* cmd = app.add_subcommand("check", "run the conformance suite on an attention spec, one line per check "
                                          "(docs/attention.md, \"Adding a variant: the files\")");
  cmd->add_option("spec", o->spec, "attention spec, e.g. 'mha(heads=2)'")->required();
  cmd->add_option("--d-model", o->d_model, "model width D (default 8)")->check(CLI::Range(1, 4096));
  cmd->add_option("--length", o->lengths, "sequence length to use (repeat for the second; default: the suite picks)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--skip", o->skip, "a check to skip (repeatable)");
  cmd->callback([o, &status] { status = run_check(*o, std::cout, std::cerr); });
}

}  // namespace attnlab::cli
