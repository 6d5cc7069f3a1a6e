// `attnlab explain SPEC --d-model D --seq N [--batch B]`: a variant's forward computation step
// by step, each op labelled by its module, with each tensor's shape, FLOPs and bytes, totals,
// and the same totals for the baseline, the fused mha of the same size. Nothing here knows a particular variant: the steps come from the op trace
// of a real forward pass (explain.hpp has the FLOP convention).
#include "experiments/cli/explain.hpp"

#include <algorithm>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "autograd/grad_mode.hpp"
#include "experiments/cli/commands.hpp"
#include "nn/attention/registry.hpp"
#include "tensor/allocator.hpp"
#include "tensor/random.hpp"

namespace attnlab::cli {
namespace {

const std::set<std::string> kElementwise = {
    "add",  "sub",     "mul",  "div",     "pow",      "maximum", "minimum", "neg",   "exp",   "log",
    "sqrt", "rsqrt",   "abs",  "square",  "reciprocal", "sin",   "cos",     "tanh",  "sigmoid", "relu",
    "gelu", "elu",     "softplus", "clamp", "where",  "masked_fill"};
const std::set<std::string> kReduction = {"sum", "cumsum"};
const std::set<std::string> kSoftmax = {"softmax", "log_softmax"};
const std::set<std::string> kMovement = {"reshape", "view",  "permute", "slice",  "select",       "narrow",
                                         "expand",  "squeeze", "unsqueeze", "transpose", "contiguous", "clone",
                                         "to",      "cat",   "stack",   "gather", "index_select", "embedding",
                                         "tril",    "triu"};

std::string shape_str(const Dims& d) { return to_string(d); }

std::string inputs_str(const std::vector<Dims>& in) {
  std::string s;
  for (const Dims& d : in) s += (s.empty() ? "" : " x ") + (d.size() ? shape_str(d) : std::string("-"));
  return s;
}

// 1234567 -> "1,234,567": FLOP and byte counts are read by people.
std::string grouped(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -v : v);
  std::string s = v < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

// "q_proj.weight" -> "q_proj"; a parameter of the layer itself ("rel_bias") -> "".
std::string owning_module(const std::string& parameter) {
  const size_t dot = parameter.rfind('.');
  return dot == std::string::npos ? "" : parameter.substr(0, dot);
}

std::string ratio(int64_t a, int64_t b) { return b > 0 ? fmt::format("{:.3f}", double(a) / double(b)) : "-"; }

void print_report(const ExplainReport& r, std::ostream& out) {
  out << fmt::format("{}  d_model={} seq={} batch={}  (forward, float32, eval mode)\n", r.spec, r.d_model, r.seq,
                     r.batch);
  if (!r.time_cost.empty()) out << "declared cost: time " << r.time_cost << "; memory " << r.memory_cost << "\n";
  size_t wmod = 6, wop = 2, win = 6, wout = 6;
  for (const auto& s : r.steps) {
    wmod = std::max(wmod, s.module.size());
    wop = std::max(wop, s.op.name.size());
    win = std::max(win, inputs_str(s.op.inputs).size());
    wout = std::max(wout, shape_str(s.op.output).size());
  }
  out << fmt::format("{:>3}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>15}  {:>13}\n", "#", "module", wmod, "op", wop, "inputs",
                     win, "output", wout, "FLOPs", "new bytes");
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const auto& s = r.steps[i];
    out << fmt::format("{:>3}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>15}  {:>13}\n", i + 1, s.module, wmod, s.op.name, wop,
                       inputs_str(s.op.inputs), win, shape_str(s.op.output), wout, s.flops_known ? grouped(s.flops) : "?",
                       s.op.new_storage ? grouped(s.op.bytes()) : "view");
  }
  out << fmt::format("total: {} FLOPs{}; {} bytes in new buffers; peak {} bytes held during the forward; "
                     "parameters {} bytes\n",
                     grouped(r.flops),
                     r.unknown_steps ? fmt::format(" (+ {} fused step(s) not counted)", r.unknown_steps) : "",
                     grouped(r.bytes_created), grouped(r.peak_bytes), grouped(r.parameter_bytes));
}

// The baseline: the fused mha of the same size (dense_twin_spec), whose tiled kernel never holds
// the (B, h, N, N) matrix, so the peak ratio is against the best dense attention can do.
void print_comparison(const ExplainReport& r, const ExplainReport& m, std::ostream& out) {
  out << fmt::format("baseline, the fused mha of the same size: {}: {} FLOPs{}; {} bytes in new buffers; peak {} "
                     "bytes\n",
                     m.spec, grouped(m.flops), m.unknown_steps ? " (some not counted)" : "", grouped(m.bytes_created),
                     grouped(m.peak_bytes));
  // A FLOP ratio with uncounted fused steps would understate the variant: say so instead.
  const std::string flop_ratio =
      r.unknown_steps || m.unknown_steps ? "n/a (fused steps not counted)" : ratio(r.flops, m.flops);
  out << fmt::format("ratio to the fused mha: FLOPs {}, new bytes {}, peak bytes {}\n", flop_ratio,
                     ratio(r.bytes_created, m.bytes_created), ratio(r.peak_bytes, m.peak_bytes));
}

}  // namespace

int64_t op_flops(const TracedOp& op, bool* known) {
  *known = true;
  if (op.flops >= 0) return op.flops;  // a fused kernel's own count
  const int64_t out = numel_of(op.output);
  if (op.name == "matmul") {
    const Dims& a = op.inputs.at(0);  // (.., m, k) or (k)
    return 2 * out * (a.size() ? a[a.size() - 1] : 1);
  }
  if (kSoftmax.count(op.name)) return 5 * out;
  if (kElementwise.count(op.name)) return out;
  if (kReduction.count(op.name)) return numel_of(op.inputs.at(0));
  if (op.name == "scatter_add") return numel_of(op.inputs.at(2));
  if (kMovement.count(op.name)) return 0;
  *known = false;
  return 0;
}

std::string dense_twin_spec(const std::string& pinned_spec, int64_t d_model) {
  const nn::Spec s = nn::parse_spec(pinned_spec);
  std::string heads, key, value;
  for (const auto& [k, v] : s.options) {
    if (k == "heads") heads = v;
    if (k == "key_size") key = v;
    if (k == "value_size") value = v;
  }
  // Attention-free variants (fnet, mixer) have no heads: one head of width D is their twin.
  if (heads.empty()) return fmt::format("mha(heads=1, key_size={}, value_size={})", d_model, d_model);
  std::string spec = "mha(heads=" + heads;
  if (!key.empty()) spec += ", key_size=" + key;
  if (!value.empty()) spec += ", value_size=" + value;
  return spec + ")";
}

ExplainReport explain_attention(const std::string& spec, int64_t d_model, int64_t seq, int64_t batch) {
  if (d_model < 1 || seq < 1 || batch < 1)
    fail<ValueError>("explain: d_model, seq and batch must be positive, got {}, {}, {}", d_model, seq, batch);
  ExplainReport r;
  auto attn = nn::make_attention(spec, d_model);
  attn->eval();  // no dropout; deterministic gates
  r.spec = attn->spec();
  r.d_model = d_model;
  r.seq = seq;
  r.batch = batch;
  const std::string name = nn::parse_spec(r.spec).name;
  for (const auto& v : nn::variants())
    if (v.schema.name == name) {
      r.time_cost = v.schema.time_cost;
      r.memory_cost = v.schema.memory_cost;
    }
  for (const auto& [n, p] : attn->named_parameters()) r.parameter_bytes += p.numel() * itemsize(p.dtype());

  Generator gen(0);
  // Grad mode on and x requiring a gradient, so that every op on the data path records history
  // and so is traced; the peak then includes what backward would keep, as in training.
  Tensor x = randn({batch, seq, d_model}, gen).requires_grad_();  // (B, N, D)
  struct GradOn {  // restores the caller's grad mode on every exit
    bool prev = GradMode::is_enabled();
    GradOn() { GradMode::set_enabled(true); }
    ~GradOn() { GradMode::set_enabled(prev); }
  } grad_on;
  {
    OpTrace trace;
    trace.mark_existing(x);
    for (const auto& [n, p] : attn->named_parameters()) trace.label_parameter(p, owning_module(n));
    for (const auto& [n, b] : attn->named_buffers()) trace.mark_existing(b);
    {
      OpTraceGuard guard(trace);
      attn->forward(x);
    }
    for (const TracedOp& op : trace.ops()) {
      ExplainStep s{op, op.module.empty() ? "attention" : "attention." + op.module};
      s.flops = op_flops(op, &s.flops_known);
      if (s.flops_known)
        r.flops += s.flops;
      else
        ++r.unknown_steps;
      r.bytes_created += op.bytes();
      r.steps.push_back(std::move(s));
    }
  }
  // The trace keeps every buffer alive, so the peak comes from a second, untraced forward.
  const int64_t base = allocator_stats().bytes_in_use;
  reset_peak_bytes();
  {
    Tensor out = attn->forward(x).output;
  }
  r.peak_bytes = allocator_stats().peak_bytes_in_use - base;
  return r;
}

namespace {

CommandBody define_explain(CLI::App& cmd) {
  struct Args {
    std::string spec;
    int64_t d_model = 0, seq = 0, batch = 1;
  };
  auto a = std::make_shared<Args>();
  cmd.add_option("SPEC", a->spec, "the attention layer, e.g. 'local(heads=4, window=16)' (quote it for the shell)")
      ->required();
  cmd.add_option("--d-model", a->d_model, "the layer's width D")->required()->check(int_range(1, 1 << 16));
  cmd.add_option("--seq", a->seq, "sequence length N")->required()->check(int_range(1, 1 << 20));
  cmd.add_option("--batch", a->batch, "batch size B (default 1)")->check(int_range(1, 1 << 16));
  cmd.footer(
      "Runs the attention layer SPEC (width D) forward once on a random (B, N, D) float32 input\n"
      "and prints every op it executed: the module it ran in (attention.q_proj, ...), the op, its\n"
      "input and output shapes, its FLOPs and the bytes of any new buffer ('view' when it only\n"
      "re-reads an earlier one); then the totals, the peak bytes held during the forward, and the\n"
      "same figures for the fused mha of the same size (same heads, key and value sizes), the\n"
      "baseline of the ratios. FLOPs: matmul 2*m*n*k per batch entry, elementwise 1 per element,\n"
      "reductions 1 per input element, softmax 5 per element, views 0; fused kernels without a\n"
      "formula are shown as '?' and left out of the total.");
  return [a](std::ostream& out, std::ostream&) {
    const ExplainReport r = explain_attention(a->spec, a->d_model, a->seq, a->batch);
    print_report(r, out);
    print_comparison(r, explain_attention(dense_twin_spec(r.spec, a->d_model), a->d_model, a->seq, a->batch), out);
    return 0;
  };
}

}  // namespace

const Command kExplainCommand = {
    "explain",
    "print a variant's forward computation step by step, op by module: shapes, FLOPs, bytes, against the fused mha "
    "of the same size",
    define_explain};

}  // namespace attnlab::cli
