// `attnlab inspect`: runs one attention layer on tensors from a safetensors file and writes
// what it computed, so that any variant can be checked against another implementation
// (PyTorch, a paper's code) tensor by tensor. The file layouts are in docs/cli.md:
//   X   x (B,N,D); optional context (B,M,D), mask (U8|BOOL, broadcastable to (B,h,N,M)),
//       grad_output (B,N,D)
//   W   every parameter and persistent buffer under the documented names, loaded strictly
//   OUT output; attention (B,h,N,M) where the variant has probabilities; l0_penalty when gated;
//       with grad_output: grad.x, grad.context, grad.<param> for every trainable parameter and
// grad.<...>head_mask (docs/attention.md, "Head gates"); in train mode buffer.<name> for every
// buffer Gradients are those of sum(output * grad_output) alone, without the L0 term (spec section
// 3). Everything goes through the generic Attention interface, so a new variant needs nothing here.
#include <cmath>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "autograd/grad_mode.hpp"
#include "experiments/analysis/statistics.hpp"
#include "experiments/cli/commands.hpp"
#include "nn/attention/registry.hpp"
#include "tensor/creation.hpp"
#include "tensor/io.hpp"
#include "tensor/random.hpp"

namespace attnlab::cli {
namespace {

struct InspectConfig {
  std::string spec;
  int64_t d_model = 0;
  std::optional<std::string> weights, input, out, save_weights, plot;
  std::vector<std::string> tokens;  // --tokens: labels of the plots' axes
  bool init = false;
  DType dtype = kFloat32;
  bool train = false;
  uint64_t seed = 0;
};

// inspect's options as CLI11 parses them; check_config turns them into an InspectConfig.
struct InspectArgs {
  InspectConfig config;
  std::string weights, input, out, save_weights, plot, tokens, dtype = "float32", mode = "eval";
  CLI::Option* tokens_option = nullptr;  // given, even as an empty string
};

// Declares inspect's options on `cmd`, bound to `a`; check_config does the checks that span
// several options once they are parsed.
void declare_options(CLI::App& cmd, InspectArgs& a) {
  InspectConfig& c = a.config;
  cmd.add_option("--spec", c.spec, "the attention layer, e.g. 'mha(heads=4)' (quote it for the shell)")->required();
  cmd.add_option("--d-model", c.d_model, "the layer's width D")->required()->check(int_range(1, int64_t(1) << 40));
  auto* weights = cmd.add_option("--weights", a.weights, "W: every parameter and buffer, loaded strictly");
  cmd.add_flag("--init", c.init, "instead of --weights: the layer's own initialisation, drawn from --seed")
      ->excludes(weights);
  cmd.add_option("--input", a.input, "X: x (B,N,D); optional context, mask, grad_output");
  cmd.add_option("--out", a.out, "OUT: output, attention, l0_penalty, grad.*, buffer.*");
  cmd.add_option("--dtype", a.dtype, "compute dtype (default float32)")->check(CLI::IsMember({"float32", "float64"}));
  cmd.add_option("--mode", a.mode, "eval (default) or train")->check(CLI::IsMember({"eval", "train"}));
  cmd.add_option("--seed", c.seed, "manual_seed before the layer is built (default 0)")
      ->check(int_range(0, INT64_MAX));
  cmd.add_option("--save-weights", a.save_weights, "write the weights used to this file");
  auto* plot = cmd.add_option("--plot", a.plot, "write one PNG heatmap per example and head to this directory");
  a.tokens_option = cmd.add_option("--tokens", a.tokens, "with --plot: one word per position, the labels of the axes")->needs(plot);
}

InspectConfig check_config(InspectArgs& a) {
  InspectConfig c = a.config;
  auto given = [](const std::string& v) { return v.empty() ? std::nullopt : std::optional<std::string>(v); };
  c.weights = given(a.weights);
  c.input = given(a.input);
  c.out = given(a.out);
  c.save_weights = given(a.save_weights);
  c.plot = given(a.plot);
  if (!c.weights && !c.init) fail<UsageError>("missing --weights W (or --init to initialise from --seed)");
  if (c.plot && !c.input) fail<UsageError>("--plot needs --input X and --out OUT");
  if (a.tokens_option->count() > 0) {
    std::istringstream words(a.tokens);
    for (std::string w; words >> w;) c.tokens.push_back(w);
    if (c.tokens.empty()) fail<UsageError>("--tokens is empty; give one word per position, e.g. --tokens \"a b c\"");
  }
  if (c.input.has_value() != c.out.has_value())
    fail<UsageError>("--input and --out go together; got only {}", c.input ? "--input" : "--out");
  if (!c.input && !c.save_weights) fail<UsageError>("missing --input X and --out OUT");
  c.dtype = a.dtype == "float64" ? kFloat64 : kFloat32;
  c.train = a.mode == "train";
  return c;
}

// Strict loading (Module::load_state_dict names missing, unexpected and mis-shaped tensors),
// plus the dtype check it leaves out: float32 and float64 convert into each other, but a float
// where the layer keeps integers (or the reverse) is a wrongly typed tensor.
void load_weights(nn::Attention& attn, const std::string& path) {
  TensorMap w = load_safetensors(path);
  for (const auto& [name, own] : attn.state_dict()) {
    auto it = w.find(name);
    if (it == w.end()) continue;
    const DType got = it->second.dtype(), want = own.dtype();
    if (is_floating_storage(got) != is_floating_storage(want) || (!is_floating_storage(want) && got != want))
      fail<ValueError>("weights {}: tensor \"{}\" has dtype {}, the layer expects {}", path, name, dtype_name(got),
                       dtype_name(want));
  }
  try {
    attn.load_state_dict(w, /*strict=*/true);
  } catch (const ValueError& e) {
    fail<ValueError>("weights {}: {}", path, e.what());
  }
}

// X's tensors by name; anything else in X is an error, so a misspelt name is not ignored.
struct Inputs {
  Tensor x, context, mask, grad_output;
};

Inputs read_inputs(const std::string& path, DType dtype) {
  TensorMap m = load_safetensors(path);
  Inputs in;
  auto floating = [&](const std::string& name) -> Tensor {
    auto it = m.find(name);
    if (it == m.end()) return {};
    if (!is_floating_storage(it->second.dtype()))
      fail<DTypeError>("input {}: tensor \"{}\" must be floating (F32, F64, F16, BF16), got {}", path, name,
                       dtype_name(it->second.dtype()));
    return to(it->second, dtype).detach();
  };
  for (const auto& [name, t] : m)
    if (name != "x" && name != "context" && name != "mask" && name != "grad_output")
      fail<ValueError>("input {}: unexpected tensor \"{}\" (X holds x, context, mask, grad_output)", path, name);
  in.x = floating("x");
  if (!in.x.defined()) fail<ValueError>("input {}: missing tensor \"x\" (B, N, D)", path);
  in.context = floating("context");
  in.grad_output = floating("grad_output");
  if (auto it = m.find("mask"); it != m.end()) {
    // U8 masks arrive as bool already (tensor/io.hpp); anything else is ambiguous.
    if (it->second.dtype() != kBool)
      fail<DTypeError>("input {}: tensor \"mask\" must be U8 or BOOL (nonzero = may attend), got {}", path,
                       dtype_name(it->second.dtype()));
    in.mask = it->second;
  }
  return in;
}

bool is_head_mask(const std::string& name) {
  return name == "head_mask" || (name.size() > 10 && name.compare(name.size() - 10, 10, ".head_mask") == 0);
}

bool has_gates(const nn::Attention& attn) {
  for (const auto& [name, m] : attn.named_modules())
    if (std::dynamic_pointer_cast<nn::HardConcreteGate>(m)) return true;
  return false;
}

int inspect(const InspectConfig& c, std::ostream& out) {
  // Seeding before the build fixes the initial weights (--init) and the layer's own generators
  // (gate samples and dropout in train mode), whether or not weights are loaded afterwards.
  manual_seed(c.seed);
  auto attn = nn::make_attention(c.spec, c.d_model);
  attn->to(c.dtype);
  if (c.weights) load_weights(*attn, *c.weights);
  const Metadata meta = {{"spec", attn->spec()},
                         {"d_model", std::to_string(c.d_model)},
                         {"dtype", std::string(dtype_name(c.dtype))},
                         {"mode", c.train ? "train" : "eval"},
                         {"seed", std::to_string(c.seed)}};
  if (c.save_weights) {
    save_safetensors(*c.save_weights, attn->state_dict(), meta);
    out << "wrote weights " << *c.save_weights << "\n";
  }
  if (!c.input) return 0;

  Inputs in = read_inputs(*c.input, c.dtype);
  const bool want_grad = in.grad_output.defined();
  attn->train(c.train);
  std::vector<std::pair<std::string, Tensor>> head_masks;
  if (want_grad) {
    in.x.requires_grad_();
    if (in.context.defined()) in.context.requires_grad_();
    // head_mask is a buffer, but its gradient is Michel et al.'s head importance (docs/attention.md).
    for (auto& [name, b] : attn->named_buffers())
      if (is_head_mask(name) && b.is_floating_point()) {
        b.requires_grad_();
        head_masks.emplace_back(name, b);
      }
  }
  nn::AttentionResult r = attn->forward(in.x, in.context, in.mask, /*causal=*/false, /*need_weights=*/true);

  TensorMap result;
  result["output"] = r.output.detach();
  if (r.attention.defined()) result["attention"] = r.attention.detach();
  if (has_gates(*attn)) {
    NoGradGuard no_grad;
    result["l0_penalty"] = attn->l0_penalty().detach();
  }
  if (c.train)
    for (const auto& [name, b] : attn->named_buffers()) result["buffer." + name] = clone(b.detach());

  if (want_grad) {
    if (in.grad_output.shape() != r.output.shape())
      fail<ShapeError>("input {}: tensor \"grad_output\" has shape {}, the output has {}", *c.input,
                       to_string(in.grad_output.shape()), to_string(r.output.shape()));
    r.output.backward(in.grad_output);  // the gradient of sum(output * grad_output)
    // A tensor the output does not depend on (a hard gate's log_alpha) has a zero gradient.
    auto grad_of = [](const Tensor& t) { return t.grad().defined() ? t.grad() : zeros(t.shape(), t.dtype()); };
    result["grad.x"] = grad_of(in.x);
    if (in.context.defined()) result["grad.context"] = grad_of(in.context);
    for (const auto& [name, p] : attn->named_parameters())
      if (p.requires_grad()) result["grad." + name] = grad_of(p);
    for (const auto& [name, b] : head_masks) result["grad." + name] = grad_of(b);
  }
  std::vector<std::string> plots;
  if (c.plot) {
    if (!r.attention.defined() || r.attention.numel() == 0)
      fail<ValueError>("--plot: {} returns no attention probabilities to plot", attn->spec());
    const int64_t N = r.attention.size(2), M = r.attention.size(3);
    if (!c.tokens.empty() && int64_t(c.tokens.size()) != N)
      fail<ValueError>("--tokens: {} tokens for {} positions (x is (B, {}, D))", c.tokens.size(), N, N);
    // Keys carry the same tokens in self-attention; a context's keys get indices.
    const bool self = !in.context.defined() && M == N;
    plots = analysis::save_attention_maps(*c.plot, r.attention, c.tokens, self ? c.tokens : std::vector<std::string>());
  }
  save_safetensors(*c.out, result, meta);

  std::string names;
  for (const auto& [name, t] : result) names += fmt::format("{}{} {}", names.empty() ? "" : ", ", name, to_string(t.shape()));
  out << "wrote " << *c.out << ": " << names << "\n";
  if (c.plot) out << "wrote " << plots.size() << " heatmaps to " << *c.plot << "\n";
  return 0;
}

}  // namespace

namespace {

CommandBody define_inspect(CLI::App& cmd) {
  auto a = std::make_shared<InspectArgs>();
  declare_options(cmd, *a);
  cmd.footer(
      "Runs the attention layer SPEC (width D) on X and writes OUT (file layouts in docs/cli.md).\n"
      "  X    x (B,N,D); optional context (B,M,D), mask (U8 or BOOL, broadcastable to\n"
      "       (B,h,N,M), 1 = may attend), grad_output (B,N,D)\n"
      "  W    every parameter and buffer under the spec's names (see attnlab variants --params)\n"
      "  OUT  output; attention (B,h,N,M) where the variant has probabilities; l0_penalty when\n"
      "       gated; with grad_output: grad.x, grad.context, grad.<name> for every trainable\n"
      "       parameter and grad.head_mask (gradients of sum(output * grad_output));\n"
      "       with --mode train: buffer.<name> for every buffer after the forward\n"
      "Exactly one of --weights and --init. --input and --out go together; with --save-weights\n"
      "both may be left out. --plot writes DIR/attention_b<b>_h<i>.png; --tokens labels its axes.\n"
      "Exit status: 0 success, 1 failure (message on stderr), 2 usage error.");
  return [a](std::ostream& out, std::ostream&) { return inspect(check_config(*a), out); };
}

}  // namespace

const Command kInspectCommand = {
    "inspect",
    "run one attention layer on tensors from a safetensors file and write its output, attention and gradients",
    define_inspect};

}  // namespace attnlab::cli
