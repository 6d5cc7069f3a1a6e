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

InspectConfig parse_args(const ArgList& a) {
  InspectConfig c;
  c.spec = a.require("--spec");
  c.d_model = parse_int_option("--d-model", a.require("--d-model"), 1, int64_t(1) << 40);
  c.weights = a.get("--weights");
  c.init = a.flag("--init");
  if (c.weights && c.init) fail<UsageError>("give either --weights W or --init, not both");
  if (!c.weights && !c.init) fail<UsageError>("missing --weights W (or --init to initialise from --seed)");
  c.input = a.get("--input");
  c.out = a.get("--out");
  c.save_weights = a.get("--save-weights");
  c.plot = a.get("--plot");
  if (c.plot && !c.input) fail<UsageError>("--plot needs --input X and --out OUT");
  if (auto t = a.get("--tokens")) {
    if (!c.plot) fail<UsageError>("--tokens labels the --plot heatmaps; give --plot DIR too");
    std::istringstream words(*t);
    for (std::string w; words >> w;) c.tokens.push_back(w);
    if (c.tokens.empty()) fail<UsageError>("--tokens is empty; give one word per position, e.g. --tokens \"a b c\"");
  }
  if (c.input.has_value() != c.out.has_value())
    fail<UsageError>("--input and --out go together; got only {}", c.input ? "--input" : "--out");
  if (!c.input && !c.save_weights) fail<UsageError>("missing --input X and --out OUT");
  const std::string dtype = a.get("--dtype").value_or("float32");
  if (dtype == "float32") c.dtype = kFloat32;
  else if (dtype == "float64") c.dtype = kFloat64;
  else fail<UsageError>("--dtype must be float32 or float64, got '{}'", dtype);
  const std::string mode = a.get("--mode").value_or("eval");
  if (mode != "eval" && mode != "train") fail<UsageError>("--mode must be eval or train, got '{}'", mode);
  c.train = mode == "train";
  if (auto s = a.get("--seed")) c.seed = static_cast<uint64_t>(parse_int_option("--seed", *s, 0, INT64_MAX));
  if (!a.positional().empty()) fail<UsageError>("unexpected argument '{}'", a.positional()[0]);
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
    if (is_floating(got) != is_floating(want) || (!is_floating(want) && got != want))
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
    if (!is_floating(it->second.dtype()))
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

void inspect_usage(std::ostream& out) {
  out << "usage: attnlab inspect --spec SPEC --d-model D (--weights W.safetensors | --init)\n"
         "                       --input X.safetensors --out OUT.safetensors\n"
         "                       [--dtype float32|float64] [--mode eval|train] [--seed S]\n"
         "                       [--save-weights W2.safetensors] [--plot DIR [--tokens \"t0 t1 ...\"]]\n"
         "\n"
         "Runs the attention layer SPEC (width D) on X and writes OUT.\n"
         "  X    x (B,N,D); optional context (B,M,D), mask (U8 or BOOL, broadcastable to\n"
         "       (B,h,N,M), 1 = may attend), grad_output (B,N,D)\n"
         "  W    every parameter and buffer under the spec's names (see attnlab variants --params)\n"
         "  OUT  output; attention (B,h,N,M) where the variant has probabilities; l0_penalty when\n"
         "       gated; with grad_output: grad.x, grad.context, grad.<name> for every trainable\n"
         "       parameter and grad.head_mask (gradients of sum(output * grad_output));\n"
         "       with --mode train: buffer.<name> for every buffer after the forward\n"
         "--init initialises the layer from --seed (default 0) instead of reading W;\n"
         "--save-weights writes the weights used (with --init and no --input, only that).\n"
         "--dtype (default float32) is the compute dtype; inputs and weights are converted to it.\n"
         "--plot DIR writes one PNG heatmap per example and head of the attention,\n"
         "  DIR/attention_b<b>_h<i>.png; --tokens labels its axes (one word per position).\n"
         "Exit status: 0 success, 1 failure (message on stderr), 2 usage error.\n";
}

int run_inspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    ArgList a(args, {"--spec", "--d-model", "--weights", "--input", "--out", "--dtype", "--mode", "--seed", "--save-weights",
               "--plot", "--tokens"},
              {"--init", "--help"});
    if (a.flag("--help")) {
      inspect_usage(out);
      return 0;
    }
    return inspect(parse_args(a), out);
  } catch (const UsageError& e) {
    err << "attnlab inspect: " << e.what() << " (try attnlab inspect --help)\n";
    return 2;
  } catch (const std::exception& e) {
    err << "attnlab inspect: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace attnlab::cli
