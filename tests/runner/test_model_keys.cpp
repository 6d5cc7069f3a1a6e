// The catalog's numeric model keys model.heads and model.key_size (experiments/models/models.hpp):
// they override the attention spec's options, so sweeps can put them on a report's x axis.
#include "experiments/models/models.hpp"
#include "helpers.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using attnlab::testing::error_of;

namespace {

Config model_config(const std::string& attention) {
  Schema s;
  models::add_model_keys(s);
  Config c(s);
  c.set("model.attention=" + attention);
  return c;
}

}  // namespace

TEST_CASE("model keys: model.heads and model.key_size override the spec's options") {
  Config c = model_config("mha(heads=4, key_size=4)");
  CHECK(models::attention_spec(c) == "mha(heads=4, key_size=4)");  // 0 = as written
  c.set("model.heads=8");
  CHECK(models::attention_spec(c) == "mha(heads=8, key_size=4)");  // replaced in place
  c.set("model.key_size=16");
  CHECK(models::attention_spec(c) == "mha(heads=8, key_size=16)");

  Config t = model_config("talking_heads");
  t.set("model.heads=2");
  CHECK(models::attention_spec(t) == "talking_heads(heads=2)");  // appended
  // The override reaches the layer: q_proj is (h*dk, D) = (2*32, 64) with dk = D/h.
  auto attn = nn::make_attention(models::attention_spec(t), 64);
  CHECK(attn->state_dict().at("q_proj.weight").shape() == Dims{64, 64});
  Config m = model_config("mha(heads=2)");
  m.set("model.key_size=3");
  attn = nn::make_attention(models::attention_spec(m), 64);
  CHECK(attn->state_dict().at("q_proj.weight").shape() == Dims{6, 64});
}

TEST_CASE("model keys: errors name the key, the value and the variant") {
  Config c = model_config("fnet");
  c.set("model.heads=4");
  CHECK(error_of([&] { models::attention_spec(c); }) == "model.heads = 4 (from --set): attention 'fnet' has no option 'heads'");
  Config n = model_config("mha(heads=4)");
  CHECK(error_of([&] { n.set("model.key_size=-1"); }) ==
        "--set: model.key_size = -1 is out of its range [0, 65536] (docs/experiments.md, \"Bounded counts\")");
}
