// The conformance suite (experiments/check/conformance.hpp) over every registered variant with
// its default options at d_model 8, and over the option combinations that change the code path.
// Each check's own logic is tested on layers that break it on purpose, at the end.
#include <set>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "experiments/check/conformance.hpp"
#include "experiments/cli/check.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

// Runs the suite and fails the test case for each failed check, naming it.
std::vector<check::CheckResult> conforms(const std::string& spec, check::CheckOptions options = {}) {
  auto results = check::check_variant(spec, options);
  CHECK(results.size() == check::check_names().size());
  for (const auto& r : results) {
    INFO(spec << " " << r.name << ": " << r.detail);
    CHECK(r.passed);
  }
  return results;
}

bool skipped(const std::vector<check::CheckResult>& results, const std::string& name) {
  for (const auto& r : results)
    if (r.name == name) return r.skipped;
  return false;
}

// Checks that do not apply by the variant's own spec (docs/attention.md).
check::CheckOptions options_for(const std::string& name) {
  check::CheckOptions o;
  // lsh: every position is hashed and sorted into chunks, masked and future ones too, so they
  // move which keys share a chunk with a query. sinkhorn: the sort matrix is made from block
  // means of x over every position, masked ones included.
  if (name == "lsh") o.skip = {"key_mask", "causal"};
  if (name == "sinkhorn") o.skip = {"key_mask"};
  // Their sizes that default from D/h need a wider model than 8 at 8 heads (rope_size = dk/2
  // even; diff's dk = D/(2h)).
  if (name == "mla" || name == "diff") o.d_model = 32;
  return o;
}

}  // namespace

TEST_CASE("conformance: every registered variant with its default options") {
  for (const auto& v : nn::variants()) {
    const std::string name = v.schema.name;
    CAPTURE(name);
    auto results = conforms(name, options_for(name));
    // what each variant supports, so that a probe that wrongly skips shows up here
    const std::set<std::string> no_mask = {"fnet", "mixer"};
    const std::set<std::string> not_causal = {"bigbird", "sinkhorn", "linformer", "compressed", "nystrom", "fnet", "mixer"};
    const std::set<std::string> no_pruning = {"fnet", "mixer"};
    CHECK(skipped(results, "masked_row") == (no_mask.count(name) > 0));
    CHECK(skipped(results, "forward_step") == (not_causal.count(name) > 0 || name == "lsh"));
    CHECK(skipped(results, "prune_heads") == (no_pruning.count(name) > 0));
  }
}

TEST_CASE("conformance: mha's options of current models, one at a time and together") {
  for (const std::string spec :
       {"mha(heads=4, kv_heads=2)", "mha(heads=2, kv_heads=1, key_size=3, value_size=5)", "mha(heads=3, key_size=2, value_size=2, alibi=true)",
        "mha(heads=2, qk_norm=true)", "mha(heads=2, softcap=0.5)", "mha(heads=2, sinks=true)", "mha(heads=2, rope=true)",
        "mha(heads=2, score=sigmoid)", "mha(heads=2, score=softpick)", "mha(heads=2, key_bias=false, gate=hard_concrete)",
        "mha(heads=4, kv_heads=2, alibi=true, qk_norm=true, softcap=2, sinks=true, rope=true, bias=false)"}) {
    CAPTURE(spec);
    conforms(spec);
  }
}

TEST_CASE("conformance: the option combinations of the other variants that change the code path") {
  for (const std::string spec :
       {"talking_heads(heads=2, logit_heads=3, value_heads=4, key_size=3, value_size=2)",
        "talking_heads(heads=2, pre=false, post=false, gate=hard_concrete)", "collaborative(heads=2, mixing_init=concatenate)",
        "synthesizer(heads=2, parts=dense+random+fixed_random+factorized_dense+factorized_random+vanilla, max_len=16, factor=2)",
        "local(heads=2, window=2, sink_tokens=2)", "sparse_strided(heads=2, stride=3)", "sparse_fixed(heads=2, block=4, summary=1)",
        "dilated(heads=2, window=1, dilation=2)", "longformer(heads=2, window=1, global=0+5, separate_global=true)",
        "bigbird(heads=2, block=2, random=1, max_len=64)", "linformer(heads=2, proj_len=3, max_len=16, share=kv)",
        "nystrom(heads=2, landmarks=2, conv=3)", "performer(heads=2, features=6, ortho=false)",
        "mla(heads=2, kv_rank=3, q_rank=4)", "diff(heads=2, key_size=2, value_size=3, layer=3)",
        "retention(heads=2, decay=0.7, chunk=3)"}) {
    CAPTURE(spec);
    conforms(spec);
  }
}
