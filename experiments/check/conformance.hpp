// The conformance suite: the contract every attention variant keeps (docs/attention.md, "What
// every variant offers" and "Adding a variant: the files"), checked on any spec the registry
// builds, built-in or added with nn::register_variant. `attnlab check SPEC` prints it;
// tests/attention/test_conformance.cpp runs it over every built-in variant.
//
//   for (const auto& r : check::check_variant("mha(heads=2, kv_heads=1)"))
//     fmt::print("{} {} {}\n", r.passed ? "PASS" : "FAIL", r.name, r.detail);
//
// Every check runs in float64 and eval mode (gates deterministic, no dropout, fixed random
// features), on random weights: each parameter gets 0.1 N(0, 1) added to its init, gate.log_alpha
// N(0, 1) and head_mask random values in [0.5, 1.5], so that zero-initialised tensors (sinks,
// mix_logits), the gates and the head_mask take part. What a variant supports is declared in its
// schema (nn::Capabilities): the checks needing a feature it declares absent SKIP, and a feature
// it declares that the layer rejects is a FAIL. A feature left to probing (Support::probe: not
// declared, or decided by the options) that the layer rejects with an attnlab error naming the
// variant makes the checks needing it SKIP; a rejection that does not name the variant, or any
// other exception, is a FAIL.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace attnlab::check {

struct CheckResult {
  std::string name;     // one of check_names()
  bool passed = false;  // true for a skipped check too
  std::string detail;   // what was compared and the largest difference, or why it failed/skipped
  bool skipped = false;
};

struct CheckOptions {
  int64_t d_model = 8;
  // Sequence lengths to use; empty: the two shortest of 4, 6, 8, 12, 16, 24, 32, 48, 64, 128 that
  // the layer accepts (bigbird, lsh, sinkhorn, nystrom and compressed need multiples of a block).
  std::vector<int64_t> lengths;
  uint64_t seed = 0;
  // Layer outputs that must agree (masked inputs perturbed, pruned vs masked, state_dict round
  // trip, forward_step vs forward) may differ by tolerance * (1 + max |reference|).
  double tolerance = 1e-9;
  // Gradcheck: at most this many elements of x and of each parameter, spread evenly.
  int64_t grad_elements = 24;
  // Checks to report as skipped by the caller (a test running a subset of the checks).
  std::set<std::string> skip;
};

// The check names in the order check_variant reports them: build, spec, shape, key_mask, causal,
// causal_key_mask, segments, masked_row, cross, state_dict, prune_heads, gradcheck,
// gradcheck_masked, forward_step, bad_options.
const std::vector<std::string>& check_names();

// Runs every check on the layer make_attention(spec, d_model) builds. A spec that does not parse
// or names no registered variant throws the registry's ValueError; a layer that fails to build
// is one failed "build" result.
std::vector<CheckResult> check_variant(const std::string& spec, const CheckOptions& options = {});

}  // namespace attnlab::check
