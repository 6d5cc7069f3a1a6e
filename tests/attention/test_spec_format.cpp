// spec() of every variant is printed by format_spec from the schema and the layer's resolved
// options (docs/attention.md, "Spec strings"): the rule itself, and the round trip
// make_attention(spec()) -> spec() for every registered variant, pruned layers included.
#include <map>

#include "helpers.hpp"
#include "registered_by_tests.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::nn;

namespace {

VariantSchema toy_schema() {
  using T = OptionType;
  return {"toy",
          "a schema for format_spec",
          {{"heads", T::Int, "8", "", {}},
           {"key_size", T::Int, "", "computed default", {}},
           {"rate", T::Double, "2.0", "", {}},
           {"flag", T::Bool, "false", "", {}},
           {"parts", T::List, "a", "", {"a", "b"}}},
          "O(1)",
          "O(1)"};
}

// name -> shape of every parameter and buffer.
std::map<std::string, Dims> shapes(const Attention& a) {
  std::map<std::string, Dims> out;
  for (const auto& [name, t] : a.state_dict()) out[name] = t.shape();
  return out;
}

// A spec of `v` with its options away from the defaults where it has them.
std::string spec_for(const VariantSchema& v) {
  auto has = [&](const char* name) {
    for (const auto& o : v.options)
      if (o.name == name) return true;
    return false;
  };
  Spec s{v.name, {}};
  if (has("heads")) s.options.emplace_back("heads", "2");
  if (has("gate")) s.options.emplace_back("gate", "hard_concrete"), s.options.emplace_back("gate_init", "0.3");
  return to_string(s);
}

}  // namespace

TEST_CASE("format_spec: every option set, in schema order, defaults included") {
  const VariantSchema s = toy_schema();
  CHECK(format_spec(s, OptionValues()) == "toy");
  // Set in another order; heads=8, rate=2 and flag=false are the defaults and still printed.
  OptionValues v;
  v.set("flag", false).set("rate", 2.0).set("key_size", int64_t{4}).set("heads", 8);
  CHECK(format_spec(s, v) == "toy(heads=8, key_size=4, rate=2, flag=false)");
  v.set("parts", std::vector<std::string>{"b", "a"}).set("rate", 0.1).set("heads", 2).set("flag", true);
  CHECK(format_spec(s, v) == "toy(heads=2, key_size=4, rate=0.1, flag=true, parts=b+a)");
  v.set("rate", 1.0 / 3);
  const Spec back = parse_spec(format_spec(s, v));
  CHECK(Options(s, back).get_double("rate") == 1.0 / 3);  // printed so that it parses back exactly
  CHECK(format_spec(s, OptionValues().set("parts", std::vector<std::string>{})) == "toy");  // empty: left out
  const std::string err = error_of([&] { format_spec(s, OptionValues().set("heds", 2)); });
  CHECK(err.find("toy") != std::string::npos);
  CHECK(err.find("heds=2") != std::string::npos);
}

TEST_CASE("every registered variant: spec() builds a layer with the same spec and parameter shapes") {
  int64_t checked = 0;
  for (const Variant& v : variants()) {
    for (const std::string& text : {v.schema.name, spec_for(v.schema)}) {
      CAPTURE(text);
      manual_seed(3);
      auto a = make_attention(text, 32);
      const std::string pinned = a->spec();
      CAPTURE(pinned);
      CHECK(parse_spec(pinned).name == v.schema.name);
      auto b = make_attention(pinned, 32);
      CHECK(b->spec() == pinned);
      CHECK(to_string(parse_spec(b->spec())) == to_string(parse_spec(pinned)));
      CHECK(shapes(*b) == shapes(*a));
      ++checked;
    }
  }
  CHECK(checked == 2 * int64_t(variants().size()));
}

TEST_CASE("every variant that declares pruning: a pruned layer's spec() rebuilds its shapes") {
  int64_t pruned = 0, pruning = 0;
  for (const Variant& v : variants()) {
    if (v.schema.capabilities.pruning == Support::no) continue;  // fnet, mixer: no heads
    if (registered_by_tests(v.schema.name)) continue;  // test layers built on mha prune to an mha
    ++pruning;
    const std::string text = spec_for(v.schema);
    CAPTURE(text);
    manual_seed(3);
    auto a = make_attention(text, 32);
    auto p = a->prune_heads({1});
    CAPTURE(p->spec());
    auto b = make_attention(p->spec(), 32);
    CHECK(b->spec() == p->spec());
    CHECK(shapes(*b) == shapes(*p));
    CHECK(parse_spec(p->spec()).name == v.schema.name);
    ++pruned;
  }
  CHECK(pruned == pruning);
}
