// `attnlab check` (experiments/cli/check.hpp): prints check_variant's results as
//   PASS  shape             output (B, N, D), finite: ...
// and a closing line with the counts.
#include "experiments/cli/check.hpp"

#include <algorithm>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "experiments/check/conformance.hpp"
#include "experiments/cli/commands.hpp"
#include "nn/attention/registry.hpp"
#include "tensor/error.hpp"

namespace attnlab::cli {

namespace {

// One line per registered variant (its bare name: every default), its failed checks' lines
// under it, and a closing count.
int run_check_all(const check::CheckOptions& o, std::ostream& out) {
  int failed_variants = 0, variants = 0;
  for (const auto& v : nn::variants()) {
    const std::string& name = v.schema.name;
    const std::vector<check::CheckResult> results = check::check_variant(name, o);
    int passed = 0, failed = 0, skipped = 0;
    for (const auto& r : results) (r.skipped ? skipped : r.passed ? passed : failed) += 1;
    out << fmt::format("{}  {:<16}  {} passed, {} failed, {} skipped\n", failed ? "FAIL" : "PASS", name, passed, failed,
                       skipped)
        << std::flush;
    for (const auto& r : results)
      if (!r.passed) out << fmt::format("      FAIL  {:<16}  {}\n", r.name, r.detail);
    ++variants;
    failed_variants += failed > 0;
  }
  out << fmt::format("{} variants at d_model {}: {} passed, {} failed\n", variants, o.d_model, variants - failed_variants,
                     failed_variants);
  return failed_variants ? 1 : 0;
}

}  // namespace

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
  if (options.all) return run_check_all(o, out);
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
  auto* spec = cmd->add_option("spec", o->spec, "attention spec, e.g. 'mha(heads=2)'");
  auto* all = cmd->add_flag("--all", o->all,
                            "instead of SPEC: every registered variant with its default options (d_model 32 unless "
                            "--d-model is given)");
  spec->excludes(all);
  auto* d_model = cmd->add_option("--d-model", o->d_model, "model width D (default 8)")->check(CLI::Range(1, 4096));
  cmd->add_option("--length", o->lengths, "sequence length to use (repeat for the second; default: the suite picks)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--skip", o->skip, "a check to skip (repeatable)");
  cmd->callback([o, d_model, spec, &status] {
    if (!o->all && spec->count() == 0) throw CLI::RequiredError("spec (or --all)");
    // Every built-in default spec builds at 32: 8 heads, mla's even rope_size, diff's D/(2h).
    if (o->all && d_model->count() == 0) o->d_model = 32;
    status = run_check(*o, std::cout, std::cerr);
  });
}

}  // namespace attnlab::cli
