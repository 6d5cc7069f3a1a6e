// nn::Module: registration rules, dotted names and their order, train/eval, to(dtype),
// zero_grad, state_dict / load_state_dict (strict and not) and save / load through a
// safetensors file, printing, Sequential and ModuleList.
#include <unistd.h>

#include <filesystem>

#include "nn/attention/registry.hpp"
#include "nn_testing.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using nn::Module;

namespace {

struct Attn : Module {
  Attn() {
    q_proj = register_module("q_proj", std::make_shared<nn::Linear>(4, 4));
    k_proj = register_module("k_proj", std::make_shared<nn::Linear>(4, 4, /*bias=*/false));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.5));
  }
  std::string type_name() const override { return "Attn"; }
  std::shared_ptr<nn::Linear> q_proj, k_proj;
  std::shared_ptr<nn::Dropout> drop;
};

struct Block : Module {
  Block() {
    attn = register_module("attn", std::make_shared<Attn>());
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(4));
  }
  std::shared_ptr<Attn> attn;
  std::shared_ptr<nn::LayerNorm> norm;
};

struct Net : Module {
  Net() {
    emb = register_module("emb", std::make_shared<nn::Embedding>(10, 4));
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    for (int i = 0; i < 2; ++i) blocks->push_back(std::make_shared<Block>());
    // Registered after the children, listed before them: a module's own entries come first.
    scale = register_parameter("scale", ones({1}));
    steps = register_buffer("steps", zeros({1}, kInt64));
    table = register_buffer("table", ones({3}), /*persistent=*/false);
  }
  std::string type_name() const override { return "Net"; }
  Tensor forward(const Tensor& ids) {
    Tensor h = emb->forward(ids);  // (B, N, 4)
    for (size_t i = 0; i < blocks->size(); ++i) {
      auto b = blocks->at<Block>(i);
      h = b->norm->forward(h + b->attn->q_proj->forward(h) * b->attn->k_proj->forward(h));
    }
    return h * scale;
  }
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<nn::ModuleList> blocks;
  Tensor scale, steps, table;
};

std::vector<std::string> names_of(const nn::NamedTensors& v) {
  std::vector<std::string> out;
  for (const auto& p : v) out.push_back(p.first);
  return out;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("attnlab_nn_" + std::to_string(::getpid()) + "_" + name)).string();
}

Tensor ids() { return from_vector<int64_t>({1, 2, 3, 9, 0, 4}, Dims{2, 3}); }

}  // namespace

TEST_CASE("named_parameters: dotted names in registration order, own entries first") {
  Net net;
  std::vector<std::string> want = {
      "scale",
      "emb.weight",
      "blocks.0.attn.q_proj.weight", "blocks.0.attn.q_proj.bias", "blocks.0.attn.k_proj.weight",
      "blocks.0.norm.weight", "blocks.0.norm.bias",
      "blocks.1.attn.q_proj.weight", "blocks.1.attn.q_proj.bias", "blocks.1.attn.k_proj.weight",
      "blocks.1.norm.weight", "blocks.1.norm.bias",
  };
  CHECK(names_of(net.named_parameters()) == want);
  CHECK(names_of(net.named_parameters(/*recurse=*/false)) == std::vector<std::string>{"scale"});
  CHECK(names_of(net.named_buffers()) == std::vector<std::string>{"steps", "table"});
  CHECK(net.parameters().size() == want.size());
  for (const Tensor& p : net.parameters()) CHECK(p.requires_grad());

  std::vector<std::string> modules;
  for (const auto& [name, m] : net.named_modules()) modules.push_back(name + ":" + m->type_name());
  CHECK(modules == std::vector<std::string>{
                       ":Net", "emb:Embedding", "blocks:ModuleList", "blocks.0:Module", "blocks.0.attn:Attn",
                       "blocks.0.attn.q_proj:Linear", "blocks.0.attn.k_proj:Linear", "blocks.0.attn.drop:Dropout",
                       "blocks.0.norm:LayerNorm", "blocks.1:Module", "blocks.1.attn:Attn",
                       "blocks.1.attn.q_proj:Linear", "blocks.1.attn.k_proj:Linear", "blocks.1.attn.drop:Dropout",
                       "blocks.1.norm:LayerNorm"});
  auto kids = net.named_children();
  REQUIRE(kids.size() == 2);
  CHECK(kids[0].first == "emb");
  CHECK(kids[1].first == "blocks");

  // Lookup by dotted name returns the very handle the layer holds.
  auto b1 = net.blocks->at<Block>(1);
  CHECK(net.get_parameter("blocks.1.norm.weight").same(b1->norm->weight));
  CHECK(net.get_parameter("scale").same(net.scale));
  CHECK(net.get_buffer("steps").same(net.steps));
  CHECK(net.get_submodule("blocks.1.attn").get() == b1->attn.get());
  CHECK_THROWS_AS(net.get_parameter("blocks.7.norm.weight"), ValueError);
  CHECK_THROWS_AS(net.get_parameter("blocks.1.norm.gamma"), ValueError);

  // 10*4 + 2 * (16 + 4 + 16 + 4 + 4) + 1
  CHECK(net.num_parameters() == 40 + 2 * 44 + 1);
  net.scale.requires_grad_(false);
  CHECK(net.num_parameters(/*trainable_only=*/true) == 40 + 2 * 44);
}

TEST_CASE("registration: duplicate names, dots, empty names and non-floating parameters are refused") {
  Module m;
  m.register_parameter("w", zeros({2}));
  CHECK_THROWS_AS(m.register_parameter("w", zeros({2})), ValueError);
  CHECK_THROWS_AS(m.register_buffer("w", zeros({2})), ValueError);
  CHECK_THROWS_AS(m.register_module("w", std::make_shared<nn::ReLU>()), ValueError);
  std::string msg = error_of([&] { m.register_parameter("a.b", zeros({2})); });
  CHECK(msg.find("a.b") != std::string::npos);
  CHECK(msg.find("'.'") != std::string::npos);
  CHECK_THROWS_AS(m.register_parameter("a.b", zeros({2})), ValueError);
  CHECK_THROWS_AS(m.register_module("x.y", std::make_shared<nn::ReLU>()), ValueError);
  CHECK_THROWS_AS(m.register_buffer("", zeros({2})), ValueError);
  CHECK_THROWS_AS(m.register_parameter("ids", zeros({2}, kInt64)), DTypeError);
  CHECK_THROWS_AS(m.register_module("null", std::shared_ptr<nn::ReLU>()), ValueError);

  // requires_grad is set (or not) on the registered tensor; a non-leaf is detached to a leaf.
  Tensor frozen = m.register_parameter("frozen", ones({3}), /*requires_grad=*/false);
  CHECK_FALSE(frozen.requires_grad());
  Tensor a = ones({2}).requires_grad_();
  Tensor p = m.register_parameter("derived", a * 2.0);
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());
  // Buffers never require grad.
  Tensor b = m.register_buffer("buf", ones({2}).requires_grad_());
  CHECK_FALSE(b.requires_grad());
}

TEST_CASE("named_generators: every layer's own generator by dotted name, names are checked") {
  Net net;
  auto gens = net.named_generators();
  REQUIRE(gens.size() == 2);
  CHECK(gens[0].first == "blocks.0.attn.drop.generator");
  CHECK(gens[1].first == "blocks.1.attn.drop.generator");
  CHECK(gens[0].second == &net.blocks->at<Block>(0)->attn->drop->generator());
  CHECK(net.named_generators(/*recurse=*/false).empty());
  // The attention layers register theirs (attention dropout; gate noise).
  auto attention = nn::make_attention("mha(heads=2, gate=hard_concrete)", 8);
  std::vector<std::string> names;
  for (auto& [name, g] : attention->named_generators()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"generator", "gate.generator"});

  Module m;
  Generator g(1);
  CHECK(&m.register_generator("rng", g) == &g);
  CHECK_THROWS_AS(m.register_generator("rng", g), ValueError);
  CHECK_THROWS_AS(m.register_buffer("rng", zeros({1})), ValueError);
  CHECK_THROWS_AS(m.register_generator("a.b", g), ValueError);
}

TEST_CASE("train/eval propagate to every descendant") {
  Net net;
  Tensor x = ones({64});
  for (const auto& [name, m] : net.named_modules()) CHECK_MESSAGE(m->is_training(), name);
  net.eval();
  for (const auto& [name, m] : net.named_modules()) CHECK_MESSAGE(!m->is_training(), name);
  auto drop = net.blocks->at<Block>(1)->attn->drop;
  CHECK(allclose(drop->forward(x), x, 0, 0));  // identity in eval
  net.train();
  for (const auto& [name, m] : net.named_modules()) CHECK_MESSAGE(m->is_training(), name);
  CHECK_FALSE(allclose(drop->forward(x), x, 0, 0));
  net.blocks->train(false);  // a subtree only
  CHECK(net.is_training());
  CHECK(net.emb->is_training());
  CHECK_FALSE(drop->is_training());
}

TEST_CASE("zero_grad drops every gradient") {
  Net net;
  sum(net.forward(ids())).backward();
  for (const auto& [name, p] : net.named_parameters()) CHECK_MESSAGE(p.grad().defined(), name);
  net.zero_grad();
  for (const auto& [name, p] : net.named_parameters()) CHECK_MESSAGE(!p.grad().defined(), name);
}

TEST_CASE("to(kFloat64) converts in place: member handles stay valid and keep requires_grad") {
  Net net;
  Tensor w = net.emb->weight;  // a handle held outside, as an optimizer would
  std::vector<double> before = w.to_vector<double>();
  Tensor y32 = net.forward(ids()).detach();
  sum(net.forward(ids())).backward();
  net.scale.requires_grad_(false);

  net.to(kFloat64);
  CHECK(w.dtype() == kFloat64);
  CHECK(w.same(net.get_parameter("emb.weight")));
  CHECK(w.requires_grad());
  CHECK_FALSE(net.scale.requires_grad());
  CHECK(w.to_vector<double>() == before);  // float32 -> float64 is exact
  CHECK(w.grad().dtype() == kFloat64);     // the gradient follows
  for (const auto& [name, p] : net.named_parameters()) CHECK_MESSAGE(p.dtype() == kFloat64, name);
  CHECK(net.table.dtype() == kFloat64);  // floating buffers convert
  CHECK(net.steps.dtype() == kInt64);    // integer buffers do not
  Tensor y64 = net.forward(ids());
  CHECK(y64.dtype() == kFloat64);
  CHECK(allclose(y64, to(y32, kFloat64), 1e-4, 1e-5));

  net.zero_grad();
  sum(y64).backward();  // the graph runs on the converted leaves
  CHECK(w.grad().dtype() == kFloat64);
  CHECK_THROWS_AS(net.to(kInt64), DTypeError);
}

TEST_CASE("state_dict holds parameters and persistent buffers only") {
  Net net;
  TensorMap sd = net.state_dict();
  CHECK(sd.size() == net.named_parameters().size() + 1);  // + "steps"; "table" is not persistent
  CHECK(sd.count("steps"));
  CHECK_FALSE(sd.count("table"));
  CHECK(sd.count("blocks.1.attn.q_proj.bias"));
  CHECK_FALSE(sd.at("emb.weight").requires_grad());
}

TEST_CASE("save / load round trip through a safetensors file") {
  manual_seed(1);
  Net a;
  a.steps.data<int64_t>()[0] = 42;
  manual_seed(2);
  Net b;
  CHECK_FALSE(allclose(a.emb->weight, b.emb->weight));
  const std::string path = temp_path("roundtrip.safetensors");
  a.save(path);
  Tensor held = b.blocks->at<Block>(0)->norm->weight;
  nn::LoadResult r = b.load(path);
  CHECK(r.missing_keys.empty());
  CHECK(r.unexpected_keys.empty());
  for (const auto& [name, t] : a.state_dict()) CHECK_MESSAGE(allclose(t, b.state_dict().at(name), 0, 0), name);
  CHECK(b.steps.data<int64_t>()[0] == 42);
  CHECK(held.same(b.get_parameter("blocks.0.norm.weight")));  // loaded in place
  CHECK(allclose(a.forward(ids()), b.forward(ids()), 0, 0));

  // Into a float64 model: values are converted to the module's dtype.
  Net c;
  c.to(kFloat64);
  c.load(path);
  CHECK(c.emb->weight.dtype() == kFloat64);
  CHECK(allclose(c.emb->weight, to(a.emb->weight, kFloat64), 0, 0));
  std::filesystem::remove(path);
}

TEST_CASE("strict load lists missing keys, unexpected keys and shape mismatches in one message") {
  Net a, b;
  TensorMap sd = a.state_dict();
  sd.erase("blocks.0.norm.bias");
  sd.erase("scale");
  sd["bogus.weight"] = zeros({3});
  sd["blocks.1.attn.q_proj.weight"] = zeros({4, 5});
  std::vector<double> before = b.emb->weight.to_vector<double>();

  std::string msg;
  try {
    b.load_state_dict(sd);
  } catch (const ValueError& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("missing keys") != std::string::npos);
  CHECK(msg.find("\"blocks.0.norm.bias\"") != std::string::npos);
  CHECK(msg.find("\"scale\"") != std::string::npos);
  CHECK(msg.find("unexpected keys") != std::string::npos);
  CHECK(msg.find("\"bogus.weight\"") != std::string::npos);
  CHECK(msg.find("shape mismatch") != std::string::npos);
  CHECK(msg.find("blocks.1.attn.q_proj.weight") != std::string::npos);
  CHECK(msg.find("(4,5)") != std::string::npos);
  CHECK(msg.find("(4,4)") != std::string::npos);
  // Nothing was copied: validation comes first.
  CHECK(b.emb->weight.to_vector<double>() == before);
}

TEST_CASE("non-strict load copies what matches and reports the rest, shape mismatches still throw") {
  Net a, b;
  TensorMap sd = a.state_dict();
  sd.erase("scale");
  sd["extra"] = ones({2});
  nn::LoadResult r = b.load_state_dict(sd, /*strict=*/false);
  CHECK(r.missing_keys == std::vector<std::string>{"scale"});
  CHECK(r.unexpected_keys == std::vector<std::string>{"extra"});
  CHECK(allclose(b.emb->weight, a.emb->weight, 0, 0));

  sd["emb.weight"] = zeros({11, 4});
  std::string msg = error_of([&] { b.load_state_dict(sd, false); });
  CHECK(msg.find("emb.weight") != std::string::npos);
  CHECK(msg.find("missing") == std::string::npos);  // not an error when non-strict
  CHECK_THROWS_AS(b.load_state_dict(sd, false), ValueError);
}

TEST_CASE("tied parameters are listed once but saved under every name") {
  Module m;
  auto e = m.register_module("emb", std::make_shared<nn::Embedding>(5, 3));
  auto head = m.register_module("head", std::make_shared<Module>());
  head->register_parameter("weight", e->weight);
  CHECK(names_of(m.named_parameters()) == std::vector<std::string>{"emb.weight"});
  CHECK(m.num_parameters() == 15);
  TensorMap sd = m.state_dict();
  CHECK(sd.count("emb.weight"));
  CHECK(sd.count("head.weight"));
}

TEST_CASE("str prints the tree with parameter shapes") {
  auto ff = std::make_shared<nn::FeedForward>(4, 8, "relu");
  std::string s = ff->str();
  INFO(s);
  CHECK(s.find("FeedForward(activation=\"relu\"") == 0);
  CHECK(s.find("(fc1): Linear(in_features=4, out_features=8, bias=true") != std::string::npos);
  CHECK(s.find("weight: (8,4) float32") != std::string::npos);
  CHECK(s.find("(dropout): Dropout(p=0)") != std::string::npos);
  auto rope = std::make_shared<nn::RotaryEmbedding>(4, 16);
  CHECK(rope->str().find("cos: (16,4) float32 (buffer, not saved)") != std::string::npos);
}

TEST_CASE("Sequential runs its layers in order, ModuleList indexes and checks types") {
  manual_seed(3);
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(3, 5), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(5, 2)});
  CHECK(seq->size() == 3);
  CHECK(names_of(seq->named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  Generator g(0);
  Tensor x = randn({4, 3}, g);
  Tensor want = (*(*seq)[2])((*(*seq)[1])((*(*seq)[0])(x)));
  CHECK(allclose((*seq)(x), want, 0, 0));
  CHECK((*seq)(x).shape() == Dims{4, 2});
  CHECK_THROWS_AS((*seq)[3], IndexError);

  nn::ModuleList list;
  list.push_back(std::make_shared<nn::Linear>(2, 2));
  list.push_back(std::make_shared<nn::LayerNorm>(2));
  CHECK(list.size() == 2);
  CHECK(list.at<nn::Linear>(0)->in_features == 2);
  CHECK(list.at<nn::UnaryModule>(1) != nullptr);
  CHECK_THROWS_AS(list.at<nn::LayerNorm>(0), ValueError);
  CHECK_THROWS_AS(list[2], IndexError);
  int n = 0;
  for (const auto& m : list) n += m != nullptr;
  CHECK(n == 2);
}
