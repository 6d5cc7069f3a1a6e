// The attention commands of the CLI (experiments/cli/commands.hpp): `variants` listings and
// parameter tables, and `inspect` round trips checked against running the same layer directly
// (outputs, attention, every gradient, train-mode sampling by seed, --init/--save-weights), for
// mha in detail and for every registered variant generically; and each error path: non-zero
// exit, a message on the error stream that names the culprit, and no output file.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "experiments/cli/commands.hpp"
#include "experiments/plot/png.hpp"
#include "experiments/runner/marked_block.hpp"
#include "helpers.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

struct Run {
  int status;
  std::string out, err;
};

Run variants(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int status = cli::run_variants(args, out, err);
  return {status, out.str(), err.str()};
}

Run inspect(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int status = cli::run_inspect(args, out, err);
  return {status, out.str(), err.str()};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The line of `text` that starts with `start` (after indentation), or "".
std::string line_of(const std::string& text, const std::string& start) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t i = line.find_first_not_of(' ');
    if (i != std::string::npos && line.compare(i, start.size(), start) == 0) return line;
  }
  return "";
}

// A fresh directory under the system temp dir, removed with everything in it.
struct TempDir {
  fs::path root;
  TempDir() {
    static int counter = 0;
    root = fs::temp_directory_path() / fmt::format("attnlab_test_cli_{}_{}", static_cast<long>(getpid()), counter++);
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  std::string operator/(const std::string& name) const { return (root / name).string(); }
};

// A float64 layer built the way inspect builds it: seeded, then converted.
std::shared_ptr<nn::Attention> build(const std::string& spec, int64_t d_model, uint64_t seed) {
  manual_seed(seed);
  auto a = nn::make_attention(spec, d_model);
  a->to(kFloat64);
  return a;
}

// What inspect should write, computed by running the layer directly.
TensorMap direct(nn::Attention& a, const Tensor& x_in, const Tensor& ctx_in, const Tensor& mask, const Tensor& gout) {
  Tensor x = x_in.detach().requires_grad_();
  Tensor ctx = ctx_in.defined() ? ctx_in.detach().requires_grad_() : Tensor();
  Tensor head_mask;
  for (auto& [name, b] : a.named_buffers())
    if (name == "head_mask") head_mask = b.requires_grad_();
  auto r = a.forward(x, ctx, mask, false, true);
  TensorMap m;
  m["output"] = r.output.detach();
  if (r.attention.defined()) m["attention"] = r.attention.detach();
  r.output.backward(gout);
  auto g = [](const Tensor& t) { return t.grad().defined() ? t.grad() : zeros(t.shape(), t.dtype()); };
  m["grad.x"] = g(x);
  if (ctx.defined()) m["grad.context"] = g(ctx);
  for (auto& [name, p] : a.named_parameters()) m["grad." + name] = g(p);
  if (head_mask.defined()) m["grad.head_mask"] = g(head_mask);
  if (head_mask.defined()) head_mask.requires_grad_(false);
  return m;
}

std::vector<std::string> inspect_args(const std::string& spec, const std::string& w, const std::string& x,
                                      const std::string& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"--spec", spec, "--d-model", "8", "--weights", w, "--input", x, "--out", out,
                                "--dtype", "float64"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// A safetensors file written byte by byte, for dtypes attnlab does not write (U8).
void write_raw_safetensors(const std::string& path, const std::string& header, const std::string& data) {
  std::string h = header;
  while ((h.size() + 8) % 8) h += ' ';
  std::ofstream f(path, std::ios::binary);
  for (int k = 0; k < 8; ++k) f.put(static_cast<char>(static_cast<uint64_t>(h.size()) >> (8 * k)));
  f << h << data;
}

}  // namespace

TEST_CASE("variants lists every registered variant with its options, types and defaults") {
  Run r = variants({});
  REQUIRE(r.status == 0);
  CHECK(r.err.empty());
  for (const auto& v : nn::variants()) {
    CAPTURE(v.schema.name);
    CHECK(contains(r.out, v.schema.name + "  " + v.schema.summary));
    for (const auto& o : v.schema.options) CHECK(contains(r.out, "  " + o.name + " "));
  }
  std::string heads = line_of(r.out, "heads ");
  CHECK(contains(heads, "int"));
  CHECK(contains(heads, " 8 "));
  CHECK(contains(heads, "number of heads"));
  std::string gate = line_of(r.out, "gate ");
  CHECK(contains(gate, "choice"));
  CHECK(contains(gate, "none"));
  CHECK(contains(gate, "hard_concrete"));
  CHECK(contains(line_of(r.out, "key_size "), "computed"));  // D/h: no literal default
  CHECK(contains(line_of(r.out, "gate_temperature "), "0.33"));

  Run one = variants({"mha"});
  CHECK(one.status == 0);
  CHECK(one.out.rfind("mha  ", 0) == 0);
  for (const auto& v : nn::variants())
    if (v.schema.name != "mha") CHECK_FALSE(contains(one.out, "\n" + v.schema.name + "  "));
  Run bad = variants({"no_such_variant"});
  CHECK(bad.status == 1);
  CHECK(contains(bad.err, "no_such_variant"));
  CHECK(contains(bad.err, "mha"));  // lists the known ones
  CHECK(variants({"--help"}).status == 0);
}

TEST_CASE("variants shows what each variant declares it supports") {
  const std::string lsh = variants({"lsh"}).out;
  CHECK(contains(lsh, "  supports: causal, key_mask, query_mask, pruning, segments\n"));
  CHECK(contains(lsh, "  lacks: cross, decoding\n"));
  CHECK(contains(lsh, "  masked, future and other documents' inputs take part in its output\n"));
  CHECK(contains(variants({"retention"}).out, "  supports: causal (only), key_mask, pruning, decoding\n"));
  CHECK(contains(variants({"sparse_strided"}).out, "  probed: cross\n"));
}

// The variant tables of README.md and docs/attention.md are the registry's: rewrite them with
// build/attnlab variants --markdown --write README.md --write docs/attention.md.
TEST_CASE("variants --markdown: README.md and docs/attention.md hold the table the registry gives") {
  Run table = variants({"--markdown"});
  REQUIRE(table.status == 0);
  CHECK(table.out.rfind("| variant | what it is | cross | causal |", 0) == 0);
  for (const auto& v : nn::variants()) CHECK(contains(table.out, "| `" + v.schema.name + "` | "));
  CHECK(contains(table.out, "| `retention` | " + nn::registered_schema("retention").summary + " | - | only |"));
  for (const std::string doc : {"README.md", "docs/attention.md"}) {
    CAPTURE(doc);
    const std::string path = std::string(ATTNLAB_SOURCE_DIR) + "/" + doc;
    CHECK(runner::marked_block(read_text(path), "variants", path, "the variant table") == table.out);
  }
  // --write replaces the block and keeps the text around it; a file without the markers is an
  // error that changes no file
  TempDir dir;
  const std::string good = dir / "good.md", bare = dir / "bare.md";
  write_text_atomic(good, "intro\n<!-- variants:begin -->\nold\n<!-- variants:end -->\nrest\n");
  write_text_atomic(bare, "no markers\n");
  Run failed = variants({"--markdown", "--write", good, "--write", bare});
  CHECK(failed.status == 1);
  CHECK(contains(failed.err, "bare.md: expected one line '<!-- variants:begin -->'"));
  CHECK(contains(read_text(good), "old"));
  Run wrote = variants({"--markdown", "--write", good});
  CHECK(wrote.status == 0);
  CHECK(read_text(good) == "intro\n<!-- variants:begin -->\n" + table.out + "<!-- variants:end -->\nrest\n");
  CHECK(variants({"--write", good}).status != 0);  // --write needs --markdown
}

TEST_CASE("variants --params prints every parameter and buffer with shape and dtype, and totals") {
  Run r = variants({"--params", "mha(heads=2, key_size=3, gate=hard_concrete)", "--d-model", "8"});
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "mha(heads=2, key_size=3, value_size=4"));  // the pinned spec
  auto has = [&](const std::string& name, const std::string& shape) {
    std::string line = line_of(r.out, name + " ");
    CAPTURE(name);
    CHECK(contains(line, shape));
    CHECK(contains(line, "float32"));
  };
  has("q_proj.weight", "(6,8)");
  has("q_proj.bias", "(6)");
  has("k_proj.weight", "(6,8)");
  has("v_proj.weight", "(8,8)");
  has("out_proj.weight", "(8,8)");
  has("out_proj.bias", "(8)");
  has("gate.log_alpha", "(2)");
  has("head_mask", "(2)");
  CHECK(r.out.find("head_mask") > r.out.find("buffers:"));
  // 2*(6*8+6) + (8*8+8) + (8*8+8) + 2 = 254
  CHECK(contains(r.out, "total: 9 parameter tensors, 254 elements (254 trainable); 1 buffers, 2 elements"));
  // the --name=value form too, and bias=false removes the bias rows
  Run nb = variants({"--params=mha(heads=2, bias=false)", "--d-model=8"});
  CHECK(nb.status == 0);
  CHECK(line_of(nb.out, "q_proj.bias").empty());
}

TEST_CASE("variants errors: missing --d-model, bad spec, unknown option, bad value") {
  Run r = variants({"--params", "mha"});
  CHECK(r.status == 2);
  CHECK(contains(r.err, "--d-model"));
  CHECK(r.out.empty());
  r = variants({"--params", "mha(heads=x)", "--d-model", "8"});
  CHECK(r.status == 1);
  CHECK(contains(r.err, "heads"));
  r = variants({"--params", "nope(heads=2)", "--d-model", "8"});
  CHECK(r.status == 1);
  CHECK(contains(r.err, "nope"));
  r = variants({"--params", "mha(heads=3)", "--d-model", "8"});  // 3 does not divide 8
  CHECK(r.status == 1);
  CHECK(contains(r.err, "key_size"));
  r = variants({"--parms", "mha"});
  CHECK(r.status == 2);
  CHECK(contains(r.err, "--parms"));
  r = variants({"--params", "mha", "--d-model", "0"});
  CHECK(r.status == 2);
  CHECK(contains(r.err, "--d-model"));
  r = variants({"--params", "mha", "--d-model", "8x"});
  CHECK(r.status == 2);
  CHECK(contains(r.err, "8x"));
}

TEST_CASE("variants rejects out-of-range and non-finite option values by name, for every variant") {
  Run r = variants({"--params", "routing(clusters=9223372036854775807)", "--d-model", "16"});
  CHECK(r.status == 1);
  CHECK(contains(r.err, "routing: option clusters=9223372036854775807"));
  CHECK(contains(r.err, "2^31-1"));
  for (const auto& v : nn::variants()) {
    for (const auto& o : v.schema.options) {
      std::vector<std::string> bad;
      if (o.type == nn::OptionType::Int) bad = {"1099511627776", "-1099511627776"};
      if (o.type == nn::OptionType::IntList) bad = {"0+1099511627776"};
      if (o.type == nn::OptionType::Double) bad = {"nan", "inf", "-inf"};
      for (const std::string& value : bad) {
        const std::string spec = v.schema.name + "(" + o.name + "=" + value + ")";
        CAPTURE(spec);
        r = variants({"--params", spec, "--d-model", "16"});
        CHECK(r.status == 1);
        CHECK(contains(r.err, v.schema.name + ": option " + o.name + "=" + value));
      }
    }
  }
}

TEST_CASE("a variant too large for the machine is a MemoryError naming the spec, d_model, shape and bytes") {
  CHECK_THROWS_AS(nn::make_attention("routing(clusters=2147483647)", 16), MemoryError);
  std::string msg = error_of([] { nn::make_attention("routing(clusters=2147483647)", 16); });
  CHECK(contains(msg, "attention routing(clusters=2147483647) with d_model=16"));
  CHECK(contains(msg, "(8,2147483647,2)"));
  CHECK(contains(msg, "137438953408 bytes"));
  Run r = variants({"--params", "routing(clusters=2147483647)", "--d-model", "16"});
  CHECK(r.status == 1);
  CHECK(contains(r.err, "physical memory"));
}

TEST_CASE("inspect round trip: output, attention, l0 and every gradient equal the layer run directly") {
  TempDir dir;
  const std::string spec = "mha(heads=2, key_size=3, gate=hard_concrete)";
  auto a = build(spec, 8, 1);
  Generator g(2);
  {
    NoGradGuard ng;  // weights unlike the seed's, so loading them matters
    for (auto& [name, p] : a->named_parameters()) copy_(p, randn(p.shape(), g, kFloat64));
    Tensor head_mask = a->get_buffer("head_mask");
    copy_(head_mask, from_vector<double>({1, 0.5}));
  }
  a->eval();
  save_safetensors(dir / "w.safetensors", a->state_dict());
  Tensor x = randn({2, 4, 8}, g, kFloat64), ctx = randn({2, 5, 8}, g, kFloat64);
  Tensor mask = from_vector<bool>({1, 1, 0, 1, 0, 0, 0, 0, 0, 0}, {2, 1, 1, 5});  // example 1: nothing allowed
  Tensor gout = randn({2, 4, 8}, g, kFloat64);
  save_safetensors(dir / "x.safetensors", {{"x", x}, {"context", ctx}, {"mask", mask}, {"grad_output", gout}});

  Run r = inspect(inspect_args(spec, dir / "w.safetensors", dir / "x.safetensors", dir / "out.safetensors", {"--seed", "9"}));
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "out.safetensors"));
  Metadata meta;
  TensorMap got = load_safetensors(dir / "out.safetensors", &meta);
  CHECK(contains(meta["spec"], "mha(heads=2"));
  CHECK(meta["mode"] == "eval");

  TensorMap want = direct(*a, x, ctx, mask, gout);
  want["l0_penalty"] = a->l0_penalty().detach();
  std::vector<std::string> got_names, want_names;
  for (auto& [n, t] : got) got_names.push_back(n);
  for (auto& [n, t] : want) want_names.push_back(n);
  CHECK(got_names == want_names);  // exactly these tensors, no buffer.* in eval mode
  for (auto& [name, t] : want) {
    CAPTURE(name);
    REQUIRE(got.count(name));
    CHECK(got[name].dtype() == kFloat64);
    CHECK(allclose(got[name], t, 1e-12, 1e-14));
  }
  CHECK(got.count("grad.q_proj.weight"));
  CHECK(got.count("grad.gate.log_alpha"));
  CHECK(got.count("grad.head_mask"));
  CHECK(got["attention"].shape() == Dims{2, 2, 4, 5});
  for (double p : narrow(got["attention"], 0, 1, 1).to_vector<double>()) CHECK(p == 0.0);  // masked row: zeros
  // The key bias cannot change the output, so its gradient is zero (seed 000), while others are not.
  for (double v : got["grad.k_proj.bias"].to_vector<double>()) CHECK(std::abs(v) < 1e-12);
  CHECK(sum(abs(got["grad.q_proj.weight"])).item() > 1e-3);

  // float32: inputs and weights converted, outputs float32, values agree loosely
  std::vector<std::string> args32 =
      inspect_args(spec, dir / "w.safetensors", dir / "x.safetensors", dir / "out32.safetensors");
  args32[args32.size() - 1] = "float32";
  REQUIRE(inspect(args32).status == 0);
  TensorMap got32 = load_safetensors(dir / "out32.safetensors");
  CHECK(got32["output"].dtype() == kFloat32);
  CHECK(allclose(to(got32["output"], kFloat64), want["output"], 1e-4, 1e-5));
}

TEST_CASE("inspect reads U8 masks (nonzero = may attend) and works without grad_output") {
  TempDir dir;
  auto a = build("mha(heads=2)", 8, 3);
  a->eval();
  save_safetensors(dir / "w.safetensors", a->state_dict());
  Generator g(4);
  Tensor x = randn({1, 4, 8}, g, kFloat64);
  std::string data(reinterpret_cast<const char*>(x.data<double>()), 32 * sizeof(double));
  data += std::string("\x01\x00\x02\x01", 4);  // mask (1, 1, 1, 4): keys 0, 2, 3 allowed
  write_raw_safetensors(dir / "x.safetensors",
                        R"({"x":{"dtype":"F64","shape":[1,4,8],"data_offsets":[0,256]},)"
                        R"("mask":{"dtype":"U8","shape":[1,1,1,4],"data_offsets":[256,260]}})",
                        data);
  Run r = inspect(inspect_args("mha(heads=2)", dir / "w.safetensors", dir / "x.safetensors", dir / "out.safetensors"));
  INFO(r.err);
  REQUIRE(r.status == 0);
  TensorMap got = load_safetensors(dir / "out.safetensors");
  Tensor mask = from_vector<bool>({true, false, true, true}, {1, 1, 1, 4});
  auto want = a->forward(x, {}, mask, false, true);
  CHECK(allclose(got["output"], want.output, 1e-12, 1e-14));
  CHECK(allclose(got["attention"], want.attention, 1e-12, 1e-14));
  for (double p : select(got["attention"], 3, 1).to_vector<double>()) CHECK(p == 0.0);
  CHECK(got.size() == 2);  // no gradients without grad_output, no l0_penalty without gates
}

TEST_CASE("inspect --mode train samples gates from --seed and writes every buffer") {
  TempDir dir;
  const std::string spec = "mha(heads=4, gate=hard_concrete, gate_init=0)";
  auto a = build(spec, 8, 0);
  save_safetensors(dir / "w.safetensors", a->state_dict());
  Generator g(5);
  Tensor x = randn({2, 3, 8}, g, kFloat64);
  save_safetensors(dir / "x.safetensors", {{"x", x}});
  auto run = [&](const std::string& seed, const std::string& out) {
    Run r = inspect(inspect_args(spec, dir / "w.safetensors", dir / "x.safetensors", dir / out,
                                 {"--mode", "train", "--seed", seed}));
    INFO(r.err);
    REQUIRE(r.status == 0);
    return load_safetensors(dir / out);
  };
  TensorMap s5 = run("5", "a.safetensors"), again = run("5", "b.safetensors"), s6 = run("6", "c.safetensors");
  CHECK(allclose(s5["output"], again["output"], 0, 0));
  CHECK_FALSE(allclose(s5["output"], s6["output"], 1e-6, 1e-8));
  REQUIRE(s5.count("buffer.head_mask"));
  CHECK(allclose(s5["buffer.head_mask"], ones({4}, kFloat64)));
  // the same as a layer seeded with 5, loaded and run in train mode
  auto b = build(spec, 8, 5);
  b->load_state_dict(load_safetensors(dir / "w.safetensors"));
  b->train();
  CHECK(allclose(s5["output"], b->forward(x).output, 1e-12, 1e-14));
  // and unlike eval mode
  b->eval();
  CHECK_FALSE(allclose(s5["output"], b->forward(x).output, 1e-6, 1e-8));
}

TEST_CASE("inspect --init with --save-weights is reproducible for a seed") {
  TempDir dir;
  const std::string spec = "mha(heads=2, gate=hard_concrete)";
  auto init = [&](const std::string& seed, const std::string& file) {
    Run r = inspect({"--spec", spec, "--d-model", "8", "--init", "--seed", seed, "--dtype", "float64",
                     "--save-weights", dir / file});
    INFO(r.err);
    REQUIRE(r.status == 0);
    return load_safetensors(dir / file);
  };
  TensorMap w1 = init("11", "w1.safetensors"), w2 = init("11", "w2.safetensors"), w3 = init("12", "w3.safetensors");
  auto same = [](const TensorMap& p, const TensorMap& q) {
    if (p.size() != q.size()) return false;
    for (auto& [n, t] : p)
      if (!q.count(n) || !allclose(t, q.at(n), 0, 0)) return false;
    return true;
  };
  CHECK(same(w1, w2));
  CHECK_FALSE(same(w1, w3));
  CHECK(same(w1, build(spec, 8, 11)->state_dict()));
  CHECK(w1.count("head_mask"));  // buffers are weights too
  CHECK(w1.count("gate.log_alpha"));

  // running with --init equals running with the saved weights
  Generator g(6);
  save_safetensors(dir / "x.safetensors", {{"x", randn({1, 3, 8}, g, kFloat64)}});
  Run a = inspect({"--spec", spec, "--d-model", "8", "--init", "--seed", "11", "--dtype", "float64", "--input",
                   dir / "x.safetensors", "--out", dir / "o1.safetensors"});
  Run b = inspect(inspect_args(spec, dir / "w1.safetensors", dir / "x.safetensors", dir / "o2.safetensors"));
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  CHECK(allclose(load_safetensors(dir / "o1.safetensors")["output"], load_safetensors(dir / "o2.safetensors")["output"],
                 0, 0));
}

TEST_CASE("inspect agrees with a direct run for every registered variant") {
  // Whatever variants are registered: with default options, inspect and a direct run give the
  // same output, attention and gradients, or both fail (a variant that cannot take the input).
  TempDir dir;
  Generator g(7);
  Tensor x = randn({2, 32, 8}, g, kFloat64), gout = randn({2, 32, 8}, g, kFloat64);
  save_safetensors(dir / "x.safetensors", {{"x", x}, {"grad_output", gout}});
  int compared = 0;
  for (const auto& v : nn::variants()) {
    const std::string spec = v.schema.name;
    CAPTURE(spec);
    TensorMap want;
    bool direct_ok = true;
    try {
      auto a = build(spec, 8, 13);
      a->eval();
      save_safetensors(dir / "w.safetensors", a->state_dict());
      want = direct(*a, x, {}, {}, gout);
    } catch (const std::exception& e) {
      MESSAGE("direct run fails: " << e.what());
      direct_ok = false;
    }
    if (!direct_ok) {
      // the layer may still build: then inspect must report the failure
      Run r = inspect({"--spec", spec, "--d-model", "8", "--init", "--seed", "13", "--dtype", "float64", "--input",
                       dir / "x.safetensors", "--out", dir / "o.safetensors"});
      CHECK(r.status != 0);
      CHECK_FALSE(r.err.empty());
      continue;
    }
    Run r = inspect(inspect_args(spec, dir / "w.safetensors", dir / "x.safetensors", dir / "o.safetensors", {"--seed", "13"}));
    INFO(r.err);
    REQUIRE(r.status == 0);
    TensorMap got = load_safetensors(dir / "o.safetensors");
    for (auto& [name, t] : want) {
      CAPTURE(name);
      REQUIRE(got.count(name));
      CHECK(allclose(got[name], t, 1e-10, 1e-12));
    }
    ++compared;
  }
  CHECK(compared >= 1);
}

TEST_CASE("inspect errors name the culprit, exit non-zero and write nothing") {
  TempDir dir;
  const std::string spec = "mha(heads=2)";
  auto a = build(spec, 8, 1);
  TensorMap w = a->state_dict();
  save_safetensors(dir / "w.safetensors", w);
  Generator g(8);
  Tensor x = randn({2, 3, 8}, g, kFloat64);
  save_safetensors(dir / "x.safetensors", {{"x", x}});
  const std::string out = dir / "out.safetensors";
  auto fails = [&](std::vector<std::string> args, int status, std::vector<std::string> words) {
    Run r = inspect(args);
    CAPTURE(r.err);
    CHECK(r.status == status);
    for (const auto& word : words) CHECK(contains(r.err, word));
    CHECK(r.err.rfind("attnlab inspect: ", 0) == 0);
    CHECK_FALSE(fs::exists(out));
  };
  auto with_w = [&](const std::string& file, TensorMap m) {
    save_safetensors(dir / file, m);
    return inspect_args(spec, dir / file, dir / "x.safetensors", out);
  };

  TensorMap missing = w;
  missing.erase("q_proj.bias");
  fails(with_w("w_missing.safetensors", missing), 1, {"missing", "q_proj.bias"});
  TensorMap extra = w;
  extra["extra.weight"] = zeros({2});
  fails(with_w("w_extra.safetensors", extra), 1, {"unexpected", "extra.weight"});
  TensorMap shaped = w;
  shaped["v_proj.weight"] = zeros({8, 7});
  fails(with_w("w_shape.safetensors", shaped), 1, {"v_proj.weight", "(8,7)"});
  TensorMap typed = w;
  typed["out_proj.weight"] = zeros({8, 8}, kInt64);
  fails(with_w("w_type.safetensors", typed), 1, {"out_proj.weight", "int64"});
  TensorMap no_buffer = w;
  no_buffer.erase("head_mask");
  fails(with_w("w_buffer.safetensors", no_buffer), 1, {"head_mask"});

  fails(inspect_args(spec, dir / "w.safetensors", dir / "x.safetensors", out, {"--bogus", "1"}), 2, {"--bogus"});
  fails({"--d-model", "8", "--weights", dir / "w.safetensors", "--input", dir / "x.safetensors", "--out", out}, 2,
        {"--spec"});
  fails(inspect_args(spec, dir / "nope.safetensors", dir / "x.safetensors", out), 1, {"nope.safetensors"});
  fails(inspect_args(spec, dir / "w.safetensors", dir / "nox.safetensors", out), 1, {"nox.safetensors"});
  fails(inspect_args("mha(heads=2, colour=red)", dir / "w.safetensors", dir / "x.safetensors", out), 1, {"colour"});
  fails(inspect_args(spec, dir / "w.safetensors", dir / "x.safetensors", out, {"--init"}), 2, {"--init"});
  fails({"--spec", spec, "--d-model", "8", "--input", dir / "x.safetensors", "--out", out}, 2, {"--weights"});
  fails(inspect_args(spec, dir / "w.safetensors", dir / "x.safetensors", out, {"--mode", "training"}), 2, {"training"});
  fails(inspect_args(spec, dir / "w.safetensors", dir / "x.safetensors", out, {"--seed", "-1"}), 2, {"--seed"});
  fails({"--spec", spec, "--d-model", "8", "--weights", dir / "w.safetensors", "--input", dir / "x.safetensors"}, 2,
        {"--out"});
  std::vector<std::string> bad_dtype = inspect_args(spec, dir / "w.safetensors", dir / "x.safetensors", out);
  bad_dtype.back() = "float16";
  fails(bad_dtype, 2, {"float16"});

  auto with_x = [&](const std::string& file, TensorMap m) {
    save_safetensors(dir / file, m);
    return inspect_args(spec, dir / "w.safetensors", dir / file, out);
  };
  fails(with_x("x_none.safetensors", {{"context", x}}), 1, {"\"x\""});
  fails(with_x("x_extra.safetensors", {{"x", x}, {"grad_out", x}}), 1, {"grad_out"});
  fails(with_x("x_gshape.safetensors", {{"x", x}, {"grad_output", zeros({2, 3, 4}, kFloat64)}}), 1,
        {"grad_output", "(2,3,4)"});
  fails(with_x("x_mask.safetensors", {{"x", x}, {"mask", ones({1, 1, 1, 3}, kInt64)}}), 1, {"mask", "int64"});
  fails(with_x("x_mshape.safetensors", {{"x", x}, {"mask", ones({1, 1, 1, 4}, kBool)}}), 1, {"mask"});
  fails(with_x("x_width.safetensors", {{"x", zeros({2, 3, 5}, kFloat64)}}), 1, {"(2,3,5)"});
  fails(with_x("x_int.safetensors", {{"x", zeros({2, 3, 8}, kInt64)}}), 1, {"\"x\"", "int64"});
  fails(with_x("x_ctx.safetensors", {{"x", x}, {"context", zeros({2, 4, 6}, kFloat64)}}), 1, {"context"});
}

// ---- inspect --plot (one PNG heatmap per example and head) ----

TEST_CASE("inspect --plot writes one readable PNG per example and head, labelled by --tokens") {
  TempDir dir;
  const std::string spec = "mha(heads=2)";
  auto a = build(spec, 8, 0);
  save_safetensors(dir / "w.safetensors", a->state_dict());
  Generator g(3);
  save_safetensors(dir / "x.safetensors", {{"x", randn({2, 4, 8}, g, kFloat64)}});
  Run r = inspect(inspect_args(spec, dir / "w.safetensors", dir / "x.safetensors", dir / "out.safetensors",
                               {"--plot", dir / "maps", "--tokens", "the cat sat down"}));
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "wrote 4 heatmaps"));
  for (const char* name : {"attention_b0_h0.png", "attention_b0_h1.png", "attention_b1_h0.png", "attention_b1_h1.png"}) {
    plot::Image img = plot::read_png((fs::path(dir / "maps") / name).string());
    CHECK(img.width > 4 * 8);
    CHECK(img.height > 4 * 8);
  }
  // Token labels are wider than index labels ("down" vs "3"), so the labelled plot is wider.
  Run plain = inspect(inspect_args(spec, dir / "w.safetensors", dir / "x.safetensors", dir / "out2.safetensors",
                                   {"--plot", dir / "plain"}));
  REQUIRE(plain.status == 0);
  CHECK(plot::read_png(dir / "maps/attention_b0_h0.png").width > plot::read_png(dir / "plain/attention_b0_h0.png").width);
}

TEST_CASE("inspect --plot errors: token count, --tokens alone, a variant without probabilities") {
  TempDir dir;
  auto a = build("mha(heads=2)", 8, 0);
  save_safetensors(dir / "w.safetensors", a->state_dict());
  Generator g(3);
  save_safetensors(dir / "x.safetensors", {{"x", randn({1, 4, 8}, g, kFloat64)}});
  Run r = inspect(inspect_args("mha(heads=2)", dir / "w.safetensors", dir / "x.safetensors", dir / "out.safetensors",
                               {"--plot", dir / "maps", "--tokens", "a b c"}));
  CHECK(r.status == 1);
  CHECK(contains(r.err, "--tokens: 3 tokens for 4 positions"));
  CHECK_FALSE(fs::exists(dir / "out.safetensors"));
  r = inspect(inspect_args("mha(heads=2)", dir / "w.safetensors", dir / "x.safetensors", dir / "out.safetensors",
                           {"--tokens", "a b c d"}));
  CHECK(r.status == 2);
  CHECK(contains(r.err, "--plot"));
  r = inspect({"--spec", "fnet", "--d-model", "8", "--init", "--input", dir / "x.safetensors", "--out",
               dir / "out.safetensors", "--plot", dir / "maps"});
  CHECK(r.status == 1);
  CHECK(contains(r.err, "no attention probabilities"));
}
