// The conformance suite (experiments/check/conformance.hpp) over every registered variant with
// its default options at d_model 8, and over the option combinations that change the code path.
// Each check's own logic is tested on layers that break it on purpose, at the end.
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "helpers.hpp"
#include "registered_by_tests.hpp"
#include "experiments/check/conformance.hpp"
#include "experiments/cli/check.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool skipped(const std::vector<check::CheckResult>& results, const std::string& name) {
  for (const auto& r : results)
    if (r.name == name) return r.skipped;
  return false;
}

// Sizes for the variants whose defaults need them (which checks apply comes from the capabilities
// in each variant's schema).
check::CheckOptions options_for(const std::string& name) {
  check::CheckOptions o;
  // Their sizes that default from D/h need a wider model than 8 at 8 heads (rope_size = dk/2
  // even; diff's dk = D/(2h)).
  if (name == "mla" || name == "diff") o.d_model = 32;
  // N = 32 (their default block, chunk or landmarks): fewer elements per gradcheck
  if (name == "lsh" || name == "sinkhorn" || name == "nystrom") o.grad_elements = 8;
  return o;
}

// Runs the suite and fails the test case for each failed check, naming it.
std::vector<check::CheckResult> conforms(const std::string& spec, const check::CheckOptions& options) {
  auto results = check::check_variant(spec, options);
  CHECK(results.size() == check::check_names().size());
  for (const auto& r : results) {
    INFO(spec << " " << r.name << ": " << r.detail);
    CHECK(r.passed);
  }
  return results;
}

// Whether a check skipped as the capabilities declared in the schema say: a declared feature runs,
// an absent one skips (a feature left to probing may do either, by the spec's options).
void check_skips_follow_capabilities(const std::vector<check::CheckResult>& results, const nn::Capabilities& c) {
  auto expect = [&](const std::string& check, nn::Support support) {
    INFO(check << " declared " << nn::to_string(support));
    if (support != nn::Support::probe) CHECK(skipped(results, check) == (support == nn::Support::no));
  };
  using nn::Support;
  const Support isolated = c.isolates_masked ? Support::yes : Support::no;
  const Support any_mask = c.key_mask == Support::no && c.query_mask == Support::no ? Support::no : Support::yes;
  auto both = [](Support a, Support b) {
    return a == Support::no || b == Support::no ? Support::no
           : a == Support::yes && b == Support::yes ? Support::yes
                                                    : Support::probe;
  };
  expect("cross", c.cross);
  expect("key_mask", both(c.key_mask, isolated));
  expect("causal", both(c.causal, isolated));
  expect("causal_key_mask", both(both(c.causal, c.key_mask), isolated));
  expect("segments", both(c.segments, isolated));
  expect("masked_row", any_mask);
  expect("prune_heads", c.pruning);
  expect("forward_step", c.decoding);
}

// Runs the suite on every registered variant for which `pick(index)`, with its default options.
void check_registered(const std::function<bool(size_t)>& pick) {
  int64_t ran = 0;
  const auto& all = nn::variants();
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string name = all[i].schema.name;
    if (!pick(i) || registered_by_tests(name)) continue;
    CAPTURE(name);
    auto results = conforms(name, options_for(name));
    check_skips_follow_capabilities(results, all[i].schema.capabilities);
    ++ran;
  }
  CHECK(ran > 0);
}

}  // namespace

// The registry split four ways by position, so that each test case stays short; a variant added
// to the registry joins one without an edit here.
TEST_CASE("conformance with default options: registered variants 0, 4, 8, ...") {
  check_registered([](size_t i) { return i % 4 == 0; });
}

TEST_CASE("conformance with default options: registered variants 1, 5, 9, ...") {
  check_registered([](size_t i) { return i % 4 == 1; });
}

TEST_CASE("conformance with default options: registered variants 2, 6, 10, ...") {
  check_registered([](size_t i) { return i % 4 == 2; });
}

TEST_CASE("conformance with default options: registered variants 3, 7, 11, ...") {
  check_registered([](size_t i) { return i % 4 == 3; });
}

TEST_CASE("every built-in variant declares each capability, leaving to probing only what its options decide") {
  // sparse_strided and sparse_fixed take a context with causal=false only; nystrom with conv = 0 only
  const std::set<std::string> cross_by_options = {"sparse_strided", "sparse_fixed", "nystrom"};
  for (const auto& v : nn::variants()) {
    if (registered_by_tests(v.schema.name)) continue;
    CAPTURE(v.schema.name);
    for (const auto& [feature, support] : v.schema.capabilities.features()) {
      CAPTURE(feature);
      CHECK((support != nn::Support::probe || (feature == "cross" && cross_by_options.count(v.schema.name))));
    }
  }
}

// The checks that move masked, future and other documents' inputs, on every registered variant at
// lengths 8 and 16, with its block-like sizes at 2 and then 4 and max_len 16: padding then covers
// whole blocks and parts of blocks, in a sequence shorter than max_len and in one as long.
TEST_CASE("conformance: key masks, causal with key masks and packed rows at block sizes 2 and 4, lengths 8 and 16") {
  const std::set<std::string> moving = {"build", "key_mask", "causal_key_mask", "segments"};
  const std::vector<std::string> sizes = {"block", "chunk", "stride", "window", "landmarks", "proj_len"};
  int64_t ran = 0, variants = 0;
  for (const auto& v : nn::variants()) {
    const std::string name = v.schema.name;
    if (registered_by_tests(name)) continue;
    ++variants;
    std::set<std::string> has;
    for (const auto& o : v.schema.options) has.insert(o.name);
    for (int64_t size : {2, 4}) {
      std::vector<std::string> options;
      if (has.count("heads")) options.push_back("heads=2");
      for (const std::string& o : sizes)  // (bigbird's window counts blocks and is odd: left at its default)
        if (has.count(o) && !(o == "window" && has.count("block"))) options.push_back(o + "=" + std::to_string(size));
      if (has.count("max_len")) options.push_back("max_len=16");
      // sizes bounded by the block: sparse_fixed's summary columns, bigbird's random blocks (at
      // block 4, max_len 16 leaves none outside the window and the global blocks)
      if (has.count("summary")) options.push_back("summary=1");
      if (has.count("random")) options.push_back(size == 2 ? "random=1" : "random=0");
      std::string spec = name;
      if (!options.empty()) spec += "(" + fmt::format("{}", fmt::join(options, ", ")) + ")";
      CAPTURE(spec);
      check::CheckOptions o = options_for(name);
      o.lengths = {8, 16};
      for (const std::string& c : check::check_names())
        if (!moving.count(c)) o.skip.insert(c);
      auto results = conforms(spec, o);
      CHECK(results[0].detail.find("lengths 8, 16") != std::string::npos);
      ++ran;
    }
  }
  CHECK(ran == 2 * variants);
}

TEST_CASE("conformance: mha's options of current models, one at a time and together") {
  for (const std::string spec :
       {"mha(heads=4, kv_heads=2)", "mha(heads=2, kv_heads=1, key_size=3, value_size=5)", "mha(heads=3, key_size=2, value_size=2, alibi=true)",
        "mha(heads=2, qk_norm=true)", "mha(heads=2, softcap=0.5)", "mha(heads=2, sinks=true)", "mha(heads=2, rope=true)",
        "mha(heads=2, score=sigmoid)", "mha(heads=2, score=softpick)", "mha(heads=2, key_bias=false, gate=hard_concrete)",
        "mha(heads=4, kv_heads=2, alibi=true, qk_norm=true, softcap=2, sinks=true, rope=true, bias=false)",
        "mha(heads=2, score=sigmoid, alibi=true, rope=true)", "mha(heads=2, score=softpick, qk_norm=true)",
        "mha(heads=3, key_size=2, value_size=3, kv_heads=3, alibi=true, gate=hard_concrete)"}) {
    CAPTURE(spec);
    conforms(spec, options_for(nn::parse_spec(spec).name));
  }
}

TEST_CASE("conformance: the option combinations of the other variants that change the code path") {
  for (const std::string spec :
       {"talking_heads(heads=2, logit_heads=3, value_heads=4, key_size=3, value_size=2)",
        "talking_heads(heads=2, pre=false, post=false, gate=hard_concrete)", "collaborative(heads=2, mixing_init=concatenate)",
        "synthesizer(heads=2, parts=dense+random+fixed_random+factorized_dense+factorized_random+vanilla, max_len=16, factor=2)",
        "local(heads=4, window=2, gate=hard_concrete)", "local(heads=2, window=2, sink_tokens=2)",
        "sparse_strided(heads=2, stride=3)", "sparse_strided(heads=2, stride=2, causal=false)",
        "sparse_fixed(heads=4, block=3, summary=1, key_size=3)", "sparse_fixed(heads=2, block=2, summary=1, causal=false)",
        "dilated(heads=2, window=1, dilation=2)", "longformer(heads=2, window=1, global=0+5, separate_global=true)",
        "bigbird(heads=2, block=2, random=1, max_len=64)", "lsh(heads=4, buckets=4, hashes=2, chunk=3, gate=hard_concrete)",
        "routing(heads=4, clusters=3, gate=hard_concrete)", "sinkhorn(heads=4, key_size=3, block=2, max_len=8, gate=hard_concrete)",
        "linformer(heads=2, proj_len=3, max_len=16, share=kv)",
        "linformer(heads=4, key_size=3, proj_len=3, max_len=6, gate=hard_concrete)",
        "nystrom(heads=4, key_size=3, landmarks=2, conv=3, gate=hard_concrete)", "linear(heads=4, key_size=3, gate=hard_concrete)",
        "performer(heads=2, features=6, ortho=false)", "performer(heads=4, features=7, key_size=3, gate=hard_concrete)",
        "mla(heads=2, kv_rank=3, q_rank=4)", "mla(heads=3, kv_rank=4, key_size=2, rope_size=2, value_size=3, gate=hard_concrete)",
        "diff(heads=2, key_size=2, value_size=3, layer=3)",
        "retention(heads=2, decay=0.7, chunk=3)"}) {
    CAPTURE(spec);
    conforms(spec, options_for(nn::parse_spec(spec).name));
  }
}

// ---- each check fails on a layer that breaks it ----

namespace {

// A user variant registered at run time: mha (its options, its key_bias fixed at true) with one
// defect chosen by the option `defect` (none passes every check).
class Defective : public nn::MultiHeadAttention {
 public:
  Defective(int64_t d_model, const nn::HeadConfig& c, std::string defect, std::string name)
      : MultiHeadAttention(d_model, c, true), defect(std::move(defect)), name(std::move(name)) {}
  nn::AttentionResult forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                              bool need_weights) override {
    if (defect == "rejects_context" && context.defined()) fail<ValueError>("{}: takes no context", name);
    if (defect == "rejects_causal" && causal) fail<ValueError>("{}: not causal", name);
    if (defect == "ignores_mask") return MultiHeadAttention::forward(x, context, {}, causal, need_weights);
    if (defect == "peeks_ahead") return MultiHeadAttention::forward(x, context, mask, false, need_weights);
    if (defect == "drops_causal_with_mask" && mask.defined())
      return MultiHeadAttention::forward(x, context, mask, false, need_weights);
    auto r = MultiHeadAttention::forward(x, context, mask, causal, need_weights);
    if (defect == "wrong_gradient") r.output = r.output + (x - x.detach()) * 0.5;  // same values, another gradient
    return r;
  }
  // Packed rows as a variant without its own segment path takes them: a segment mask into forward
  // (mha's fused kernel would otherwise take the ids itself, past the defects above).
  nn::AttentionResult forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask, bool causal,
                                       bool need_weights) override {
    return nn::Attention::forward_segments(x, segment_ids, mask, causal, need_weights);
  }
  std::shared_ptr<nn::Attention> prune_heads(const std::vector<int64_t>& keep) const override {
    if (defect == "unnamed_error") fail<ValueError>("cannot prune");
    return MultiHeadAttention::prune_heads(nn::check_keep(keep, config.heads, name.c_str()));
  }
  std::string spec() const override {
    std::string s = MultiHeadAttention::spec();  // mha(heads=..., ...)
    return name + "(defect=" + defect + ", " + s.substr(4);
  }
  std::string defect, name;
};

// Registers Defective as `name` with the capabilities `caps` and the default defect `defect`
// (mha's schema otherwise). Each passes every check with its defaults, so that the loops over the
// registry hold when the test binary runs whole.
void register_defective_as(const std::string& name, const nn::Capabilities& caps, const std::string& defect = "none") {
  nn::VariantSchema s = nn::MultiHeadAttention::schema();
  s.name = name;
  s.capabilities = caps;
  s.options.push_back({"defect", nn::OptionType::Choice, defect, "the check this layer breaks",
                       {"none", "ignores_mask", "peeks_ahead", "drops_causal_with_mask", "wrong_gradient",
                        "unnamed_error", "rejects_context", "rejects_causal"}});
  nn::register_variant({s, [name](const nn::Options& o, int64_t d) -> std::shared_ptr<nn::Attention> {
                          return std::make_shared<Defective>(d, nn::read_head_config(o, d, o.get_int("heads")),
                                                             o.get_choice("defect"), name);
                        }});
}

void register_defective() {
  static const bool once = [] {
    register_defective_as("defective", nn::Capabilities::all());
    return true;
  }();
  (void)once;
}

// The names of the checks that failed, in check order, joined by ", ".
std::string failures(const std::string& spec) {
  std::vector<std::string> out;
  for (const auto& r : check::check_variant(spec))
    if (!r.passed) out.push_back(r.name);
  return fmt::format("{}", fmt::join(out, ", "));
}

}  // namespace

TEST_CASE("conformance: a user-registered variant is checked, and each defect fails its checks") {
  register_defective();
  CHECK(failures("defective(heads=2)").empty());
  // (prune_heads returns a plain mha, which the masked defective layer no longer equals)
  CHECK(failures("defective(heads=2, defect=ignores_mask)") ==
        "key_mask, causal_key_mask, segments, masked_row, cross, prune_heads");
  CHECK(failures("defective(heads=2, defect=peeks_ahead)") ==
        "causal, causal_key_mask, segments, prune_heads, forward_step");
  // causal without a mask is kept, so `causal` and `forward_step` pass; with a key mask, and with
  // segment ids (a mask inside forward_packed, as training with task.pack = true), the future leaks
  CHECK(failures("defective(heads=2, defect=drops_causal_with_mask)") == "causal_key_mask, segments, prune_heads");
  for (const auto& r : check::check_variant("defective(heads=2, defect=drops_causal_with_mask)"))
    if (r.name == "causal_key_mask" || r.name == "segments") CHECK_MESSAGE(contains(r.detail, "moved when positions"), r.detail);
  CHECK(failures("defective(heads=2, defect=wrong_gradient)") == "cross, gradcheck, gradcheck_masked");
  CHECK(failures("defective(heads=2, defect=unnamed_error)") == "prune_heads");
  // a layer that fails to build is one failed result
  auto r = check::check_variant("mha(heads=3)");
  REQUIRE(r.size() == 1);
  CHECK(r[0].name == "build");
  CHECK_FALSE(r[0].passed);
  CHECK(contains(r[0].detail, "heads"));
  CHECK_THROWS_AS(check::check_variant("no_such_variant"), ValueError);
  // skipped checks pass and say why
  check::CheckOptions o;
  o.skip = {"gradcheck"};
  for (const auto& c : check::check_variant("fnet", o)) {
    CAPTURE(c.name);
    CHECK(c.passed);
    if (c.name == "gradcheck") CHECK(c.detail == "skipped by the caller");
    if (c.name == "key_mask") CHECK((c.skipped && contains(c.detail, "declares no key mask")));
  }
}

TEST_CASE("conformance: the declared capabilities decide what runs, and a declared feature the layer rejects fails") {
  register_defective();
  static const bool once = [] {
    register_defective_as("undeclared", nn::Capabilities{});  // every feature probed
    nn::Capabilities self_only = nn::Capabilities::all(), not_causal = nn::Capabilities::all();
    self_only.cross = nn::Support::no;
    not_causal.causal = not_causal.decoding = nn::Support::no;
    register_defective_as("self_only", self_only);
    register_defective_as("claims_not_causal", not_causal, "rejects_causal");
    return true;
  }();
  (void)once;
  auto result = [](const std::string& spec, const std::string& check) {
    for (const auto& r : check::check_variant(spec))
      if (r.name == check) return r;
    return check::CheckResult{};
  };
  // declared (mha's schema): a rejected context fails, naming the declaration
  CHECK(failures("defective(heads=2, defect=rejects_context)") == "cross");
  CHECK(contains(result("defective(heads=2, defect=rejects_context)", "cross").detail,
                 "declares context in its capabilities but rejects it: defective: takes no context"));
  // not declared: the same rejection is probed and skips, with the layer's message
  CHECK(failures("undeclared(heads=2, defect=rejects_context)").empty());
  const auto probed = result("undeclared(heads=2, defect=rejects_context)", "cross");
  CHECK(probed.skipped);
  CHECK(contains(probed.detail, "takes no context: undeclared: takes no context"));
  // declared absent: skipped without trying, although the layer would pass
  const auto absent = result("self_only(heads=2)", "cross");
  CHECK(absent.skipped);
  CHECK(contains(absent.detail, "declares no cross-attention"));
  // an absence the layer contradicts (causal declared absent, and accepted) fails the build check
  CHECK(failures("claims_not_causal(heads=2)").empty());
  const auto contradicted = check::check_variant("claims_not_causal(heads=2, defect=none)");
  REQUIRE(contradicted.size() == 1);
  CHECK_FALSE(contradicted[0].passed);
  CHECK(contains(contradicted[0].detail, "declares no causal in its capabilities, but forward(..., causal=true) runs"));
  CHECK(nn::variant_registration_errors().empty());
}

TEST_CASE("attnlab check prints one line per check, exit 0 all pass, 1 a failure, 2 a bad spec") {
  auto run = [](cli::CheckCommandOptions o, std::string* text = nullptr) {
    std::ostringstream out, err;
    const int status = cli::run_check(o, out, err);
    if (text) *text = out.str() + err.str();
    return status;
  };
  std::string text;
  CHECK(run({"mha(heads=2)", 8, {}, {}}, &text) == 0);
  for (const std::string& name : check::check_names()) CHECK(contains(text, "PASS  " + name + " "));
  CHECK(contains(text, "mha(heads=2): 15 checks passed, 0 failed, 0 skipped"));
  register_defective();
  CHECK(run({"defective(heads=2, defect=peeks_ahead)", 8, {4, 6}, {}}, &text) == 1);
  CHECK(contains(text, "FAIL  causal "));
  CHECK(run({"local(heads=2, window=1)", 8, {}, {"gradcheck", "gradcheck_masked"}}, &text) == 0);
  CHECK(contains(text, "SKIP  gradcheck         skipped by the caller"));
  CHECK(run({"mha(heads=2", 8, {}, {}}, &text) == 2);
  CHECK(contains(text, "attnlab check: attention spec \"mha(heads=2\": missing ')'"));
  CHECK(run({"no_such_variant", 8, {}, {}}, &text) == 2);
  CHECK(contains(text, "unknown variant no_such_variant"));
  CHECK(run({"mha", 8, {}, {"no_such_check"}}, &text) == 2);
  CHECK(contains(text, "--skip no_such_check: not a check"));
  // --all: a line per registered variant (the quick checks only, here), then the count
  cli::CheckCommandOptions all{"", 32, {}, {}, true};
  for (const std::string& c : check::check_names())
    if (c != "build" && c != "spec" && c != "shape") all.skip.push_back(c);
  CHECK(run(all, &text) == 0);
  for (const auto& v : nn::variants()) CHECK(contains(text, "PASS  " + v.schema.name + " "));
  CHECK(contains(text, fmt::format("{} variants at d_model 32: {} passed, 0 failed", nn::variants().size(),
                                   nn::variants().size())));
  CHECK(run({"", 8, {}, {"gradcheck", "gradcheck_masked", "cross", "prune_heads", "forward_step"}, true}, &text) == 1);
  CHECK(contains(text, "FAIL  mla "));  // its default rope_size needs a wider model than 8 at 8 heads
  CHECK(contains(text, "      FAIL  build "));
}
