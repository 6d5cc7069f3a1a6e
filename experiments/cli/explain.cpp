// `attnlab explain SPEC --d-model D (--seq N [--composed] [--causal] | --decode L) [--batch B]`: a
// variant's forward computation (or one decoding step against an L-position cache) step by step,
// each op labelled by its module, with each tensor's shape, FLOPs and bytes, totals, and the same
// totals for the baseline, mha of the same size. --composed and --decode add a column saying what
// each step does. Nothing here knows a particular variant: the steps come from the op trace of a
// real forward pass or decoding step (explain.hpp has the FLOP convention).
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

bool describes(const ExplainReport& r) { return r.options.composed || r.options.decode > 0; }

std::string mode_str(const ExplainReport& r) {
  if (r.options.decode > 0)
    return fmt::format("one decoding step: 1 new position against a cache of {} positions, float32, eval mode",
                       r.options.decode);
  return fmt::format("forward{}{}, float32, eval mode", r.options.composed ? ", composed path (need_weights)" : "",
                     r.options.causal ? ", causal" : "");
}

void print_report(const ExplainReport& r, std::ostream& out) {
  if (r.options.decode > 0)
    out << fmt::format("{}  d_model={} batch={}  ({})\n", r.spec, r.d_model, r.batch, mode_str(r));
  else
    out << fmt::format("{}  d_model={} seq={} batch={}  ({})\n", r.spec, r.d_model, r.seq, r.batch, mode_str(r));
  if (!r.time_cost.empty()) out << "declared cost: time " << r.time_cost << "; memory " << r.memory_cost << "\n";
  size_t wmod = 6, wop = 2, win = 6, wout = 6;
  for (const auto& s : r.steps) {
    wmod = std::max(wmod, s.module.size());
    wop = std::max(wop, s.op.name.size());
    win = std::max(win, inputs_str(s.op.inputs).size());
    wout = std::max(wout, shape_str(s.op.output).size());
  }
  const bool does = describes(r);
  out << fmt::format("{:>3}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>15}  {:>13}{}\n", "#", "module", wmod, "op", wop, "inputs",
                     win, "output", wout, "FLOPs", "new bytes", does ? "  does" : "");
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const auto& s = r.steps[i];
    out << fmt::format("{:>3}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>15}  {:>13}{}\n", i + 1, s.module, wmod, s.op.name, wop,
                       inputs_str(s.op.inputs), win, shape_str(s.op.output), wout, s.flops_known ? grouped(s.flops) : "?",
                       s.op.new_storage ? grouped(s.op.bytes()) : "view", does ? "  " + s.does : "");
  }
  out << fmt::format("total: {} FLOPs{}; {} bytes in new buffers; peak {} bytes held during the {}; "
                     "parameters {} bytes\n",
                     grouped(r.flops),
                     r.unknown_steps ? fmt::format(" (+ {} fused step(s) not counted)", r.unknown_steps) : "",
                     grouped(r.bytes_created), grouped(r.peak_bytes), r.options.decode > 0 ? "step" : "forward",
                     grouped(r.parameter_bytes));
  if (r.options.decode > 0 && r.cache_grows)
    out << fmt::format("cache: {} bytes for {} positions ({} bytes per position), all of it read by every step\n",
                       grouped(r.cache_bytes), r.cache_positions, grouped(r.cache_bytes / r.cache_positions));
  else if (r.options.decode > 0)
    out << fmt::format("cache: {} bytes, a state whose size does not grow with the length ({} positions consumed)\n",
                       grouped(r.cache_bytes), r.cache_positions);
}

// The baseline: the fused mha of the same size (dense_twin_spec), whose tiled kernel never holds
// the (B, h, N, N) matrix, so the peak ratio is against the best dense attention can do. In decode
// mode, mha's decoding step against the same cache length.
void print_comparison(const ExplainReport& r, const ExplainReport& m, std::ostream& out) {
  const bool decode = r.options.decode > 0;
  out << fmt::format("baseline, {} of the same size: {}: {} FLOPs{}; {} bytes in new buffers; peak {} bytes{}\n",
                     decode ? "mha's decoding step" : "the fused mha", m.spec, grouped(m.flops),
                     m.unknown_steps ? " (some not counted)" : "", grouped(m.bytes_created), grouped(m.peak_bytes),
                     decode ? fmt::format("; cache {} bytes", grouped(m.cache_bytes)) : "");
  // A FLOP ratio with uncounted fused steps would understate the variant: say so instead.
  const std::string flop_ratio =
      r.unknown_steps || m.unknown_steps ? "n/a (fused steps not counted)" : ratio(r.flops, m.flops);
  out << fmt::format("ratio to {}: FLOPs {}, new bytes {}, peak bytes {}{}\n", decode ? "mha's step" : "the fused mha",
                     flop_ratio, ratio(r.bytes_created, m.bytes_created), ratio(r.peak_bytes, m.peak_bytes),
                     decode ? ", cache bytes " + ratio(r.cache_bytes, m.cache_bytes) : "");
}

struct GradOn {  // restores the caller's grad mode on every exit
  bool prev = GradMode::is_enabled();
  GradOn() { GradMode::set_enabled(true); }
  ~GradOn() { GradMode::set_enabled(prev); }
};

// The trace's ops as steps, with FLOPs and descriptions, and their totals.
void add_steps(ExplainReport& r, const OpTrace& trace, int64_t keys) {
  StepContext context{keys, {}, r.options.causal};
  for (const TracedOp& op : trace.ops()) {
    ExplainStep s;
    s.op = op;
    s.module = op.module.empty() ? "attention" : "attention." + op.module;
    s.flops = op_flops(op, &s.flops_known);
    s.does = step_description(s, context);
    if (kSoftmax.count(op.name)) context.weights = op.output;
    if (s.flops_known)
      r.flops += s.flops;
    else
      ++r.unknown_steps;
    r.bytes_created += op.bytes();
    r.steps.push_back(std::move(s));
  }
}

void prepare_trace(OpTrace& trace, nn::Attention& attn, const Tensor& x) {
  trace.mark_existing(x);
  for (const auto& [n, p] : attn.named_parameters()) trace.label_parameter(p, owning_module(n));
  for (const auto& [n, b] : attn.named_buffers()) trace.mark_existing(b);
}

// One decoding step of one new position against a cache of r.options.decode positions: traced
// once, then run again untraced on a second, identically filled cache for the peak.
void explain_decode(ExplainReport& r, nn::Attention& attn, Generator& gen) {
  const int64_t L = r.options.decode, B = r.batch, D = r.d_model;
  auto filled_cache = [&] {
    auto cache = attn.make_cache(B, L + 1);
    Generator g(1);
    Tensor past = randn({B, L, D}, g);  // (B, L, D)
    // In chunks, so that no (L, L) block of scores is ever built.
    for (int64_t at = 0; at < L; at += 256) attn.forward_step(narrow(past, 1, at, std::min<int64_t>(256, L - at)), *cache);
    return cache;
  };
  Tensor x = randn({B, 1, D}, gen).requires_grad_();  // (B, 1, D): the new position
  {
    auto cache = filled_cache();
    OpTrace trace;
    trace.through_no_grad = true;  // forward_step turns recording off; the trace needs it on
    prepare_trace(trace, attn, x);
    {
      OpTraceGuard guard(trace);
      attn.forward_step(x, *cache);
    }
    add_steps(r, trace, L + 1);
  }
  auto cache = filled_cache();
  const int64_t base = allocator_stats().bytes_in_use;
  reset_peak_bytes();
  {
    Tensor out = attn.forward_step(x.detach(), *cache);
  }
  r.peak_bytes = allocator_stats().peak_bytes_in_use - base;
  r.cache_bytes = cache->numel() * int64_t(itemsize(kFloat32));
  r.cache_positions = L + 1;
  // A cache preallocated per position doubles with max_len; a recurrent state or a window does not.
  r.cache_grows = attn.make_cache(B, 2 * (L + 1))->numel() > attn.make_cache(B, L + 1)->numel();
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

ExplainReport explain_attention(const std::string& spec, int64_t d_model, int64_t seq, int64_t batch,
                                const ExplainOptions& options) {
  if (options.decode < 0) fail<ValueError>("explain: the decode cache length must be positive, got {}", options.decode);
  if (d_model < 1 || batch < 1 || (options.decode == 0 && seq < 1))
    fail<ValueError>("explain: d_model, seq and batch must be positive, got {}, {}, {}", d_model, seq, batch);
  ExplainReport r;
  auto attn = nn::make_attention(spec, d_model);
  attn->eval();  // no dropout; deterministic gates
  r.spec = attn->spec();
  r.d_model = d_model;
  r.seq = options.decode > 0 ? 1 : seq;
  r.batch = batch;
  r.options = options;
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
  GradOn grad_on;
  if (options.decode > 0) {
    explain_decode(r, *attn, gen);
    return r;
  }
  Tensor x = randn({batch, seq, d_model}, gen).requires_grad_();  // (B, N, D)
  auto forward = [&] { return attn->forward(x, {}, {}, options.causal, options.composed); };
  {
    OpTrace trace;
    prepare_trace(trace, *attn, x);
    {
      OpTraceGuard guard(trace);
      forward();
    }
    add_steps(r, trace, seq);
  }
  // The trace keeps every buffer alive, so the peak comes from a second, untraced forward.
  const int64_t base = allocator_stats().bytes_in_use;
  reset_peak_bytes();
  {
    nn::AttentionResult out = forward();
  }
  r.peak_bytes = allocator_stats().peak_bytes_in_use - base;
  return r;
}

std::string step_description(const ExplainStep& step, const StepContext& context) {
  const TracedOp& op = step.op;
  const std::string& n = op.name;
  auto last = [](const Dims& d) { return d.size() ? d[d.size() - 1] : int64_t(0); };
  if (step.module != "attention") {  // an op reading a submodule's parameters
    const std::string m = step.module.substr(std::string("attention.").size());
    if (n == "matmul") return m + ": multiply by its weight, a linear map of every position";
    if (n == "add") return m + ": add its bias";
    if (kMovement.count(n)) return m + ": lay out its weight (no arithmetic)";
    return m + ": " + n;
  }
  if (n == "tile_attention") return "fused: scores, softmax and P V tile by tile (online softmax); no (N, M) matrix held";
  if (n == "matmul" && op.inputs.size() == 2) {
    if (!context.weights.empty() && op.inputs[0] == context.weights)
      return "P V: each query's weighted average of the values";
    if (last(op.output) == context.keys) return "scores Q K^T: every query against every key";
    return "matmul";
  }
  if (kSoftmax.count(n))
    return context.masked ? "mask and softmax: pairs the mask forbids get weight 0 exactly, each row sums to 1"
                          : "softmax over the keys: each row of scores becomes weights that sum to 1";
  if (n == "mul") {
    if (op.inputs.size() < 2 || numel_of(op.inputs[1]) == 1)
      return "multiply by a constant (a scale, such as 1/sqrt(dk) on the queries or scores)";
    const Dims& b = op.inputs[1];
    if (b.size() >= 2 && b[b.size() - 1] == 1 && b[b.size() - 2] == 1)
      return "multiply each head by its factor (gate and head_mask)";
    return "elementwise product";
  }
  if (n == "reshape" || n == "view" || n == "permute" || n == "transpose")
    return "rearrange: split into heads, merge heads or transpose (no arithmetic)";
  if (n == "contiguous" || n == "clone") return "copy into a contiguous layout";
  if (n == "cat" || n == "narrow" || n == "slice" || n == "select") return "select or join parts (no arithmetic)";
  if (n == "expand") return "broadcast shared heads (no copy)";
  return n;
}

namespace {

CommandBody define_explain(CLI::App& cmd) {
  struct Args {
    std::string spec;
    int64_t d_model = 0, seq = 0, batch = 1, decode = 0;
    bool composed = false, causal = false;
  };
  auto a = std::make_shared<Args>();
  cmd.add_option("SPEC", a->spec, "the attention layer, e.g. 'local(heads=4, window=16)' (quote it for the shell)")
      ->required();
  cmd.add_option("--d-model", a->d_model, "the layer's width D")->required()->check(int_range(1, 1 << 16));
  cmd.add_option("--seq", a->seq, "sequence length N (required unless --decode)")->check(int_range(1, 1 << 20));
  cmd.add_option("--batch", a->batch, "batch size B (default 1)")->check(int_range(1, 1 << 16));
  cmd.add_flag("--composed", a->composed,
               "trace the composed path (need_weights): QK^T, scale, mask, softmax and PV as separate steps, "
               "with a column saying what each does");
  cmd.add_flag("--causal", a->causal, "run the forward with the causal mask");
  cmd.add_option("--decode", a->decode,
                 "trace one decoding step (forward_step) of 1 new position against a cache of L positions, "
                 "with the cache's bytes, against mha's step")
      ->check(int_range(1, 1 << 20));
  cmd.footer(
      "Runs the attention layer SPEC (width D) forward once on a random (B, N, D) float32 input\n"
      "and prints every op it executed: the module it ran in (attention.q_proj, ...), the op, its\n"
      "input and output shapes, its FLOPs and the bytes of any new buffer ('view' when it only\n"
      "re-reads an earlier one); then the totals, the peak bytes held during the forward, and the\n"
      "same figures for the fused mha of the same size (same heads, key and value sizes), the\n"
      "baseline of the ratios. FLOPs: matmul 2*m*n*k per batch entry, elementwise 1 per element,\n"
      "reductions 1 per input element, softmax 5 per element, views 0; fused kernels without a\n"
      "formula are shown as '?' and left out of the total.\n"
      "--composed runs the forward that returns the attention weights, so mha's fused kernel is\n"
      "replaced by its composed twin, and adds a 'does' column. --decode L instead traces one\n"
      "decoding step against a cache of L positions (--seq unused) and prints the cache's bytes;\n"
      "the baseline is then mha's decoding step at the same L.");
  return [a](std::ostream& out, std::ostream&) {
    if (a->decode == 0 && a->seq == 0)
      fail<UsageError>("--seq N is required (or --decode L for one decoding step)");
    if (a->decode > 0 && (a->composed || a->causal))
      fail<UsageError>("--decode traces forward_step, which is causal and has one path; drop "
                               "--composed and --causal");
    const ExplainOptions options{a->composed, a->causal, a->decode};
    const ExplainReport r = explain_attention(a->spec, a->d_model, a->seq, a->batch, options);
    print_report(r, out);
    ExplainOptions base = options;
    base.composed = false;  // the baseline is the fused mha
    print_comparison(r, explain_attention(dense_twin_spec(r.spec, a->d_model), a->d_model, a->seq, a->batch, base), out);
    return 0;
  };
}

}  // namespace

const Command kExplainCommand = {
    "explain",
    "print a variant's forward computation (or one decoding step) op by op: shapes, FLOPs, bytes, what each step "
    "does, against mha of the same size",
    define_explain};

}  // namespace attnlab::cli
