// The conformance checks (experiments/check/conformance.hpp), one small function each. Inputs
// are built as plain vectors so that single positions can be perturbed; every layer is float64
// and in eval mode.
#include "experiments/check/conformance.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>

#include <fmt/ranges.h>

#include "attnlab.hpp"
#include "autograd/gradcheck.hpp"
#include "nn/attention/registry.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::check {
namespace {

using Layer = std::shared_ptr<nn::Attention>;

// Thrown by a check that does not apply to this variant; reported as a skipped result.
struct Skip {
  std::string why;
};

// What the checks share: the spec, its sizes, what the variant declares and what the layer was
// found to accept.
struct Subject {
  std::string spec;
  std::string variant;
  CheckOptions options;
  nn::Capabilities caps = {};     // from the variant's schema
  int64_t n = 0;                  // the shortest accepted length: most checks run at (2, n, D)
  int64_t n_long = 0;             // the second accepted length (the shape check)
  bool causal = false;            // forward(..., causal=true) is accepted
  std::string causal_error = {};  // why not, when not
};

using nn::Support;

// The checks needing `feature` SKIP when the variant declares it absent.
void require(Support support, const std::string& feature) {
  if (support == Support::no) throw Skip{fmt::format("declares no {} (the capabilities of its schema)", feature)};
}

// The checks that move masked, future or other documents' inputs SKIP for a variant whose
// outputs depend on them by its definition (lsh).
void require_isolation(const Subject& s) {
  if (!s.caps.isolates_masked)
    throw Skip{"declares that masked, future and other documents' inputs take part in its output (isolates_masked = "
               "false in its schema)"};
}

// A rejection `why` of `feature`: a SKIP when the variant leaves the feature to probing, a FAIL
// when it declares it.
[[noreturn]] void rejected(Support support, const std::string& feature, const std::string& why) {
  if (support == Support::yes) fail<ValueError>("declares {} in its capabilities but rejects it: {}", feature, why);
  throw Skip{fmt::format("takes no {}: {}", feature, why)};
}

// Both features together: absent if either is, declared if both are.
Support both(Support a, Support b) {
  if (a == Support::no || b == Support::no) return Support::no;
  return a == Support::yes && b == Support::yes ? Support::yes : Support::probe;
}

// Adds 0.1 N(0, 1) to every parameter but the gates' log_alpha, drawn from N(0, 1), and draws
// head_mask from U(0.5, 1.5).
void randomise_state(nn::Attention& layer, uint64_t seed) {
  NoGradGuard no_grad;
  Generator gen(seed);
  for (auto& [name, p] : layer.named_parameters())
    if (name == "gate.log_alpha" || name.ends_with(".gate.log_alpha"))
      kernels::copy_(p, randn(p.shape(), gen, p.dtype()));  // gates spread over (0, 1), some at 0
    else
      kernels::copy_(p, p + randn(p.shape(), gen, p.dtype()) * 0.1);
  for (auto& [name, b] : layer.named_buffers())
    if (name == "head_mask" || name.ends_with(".head_mask")) kernels::copy_(b, rand(b.shape(), gen, b.dtype(), 0.5, 1.5));
}

// The layer of `spec` in float64 and eval mode, initialised from `seed`, without randomise_state.
Layer build_plain(const std::string& spec, int64_t d_model, uint64_t seed) {
  manual_seed(seed);
  Layer layer = nn::make_attention(spec, d_model);
  layer->to(kFloat64);
  layer->eval();
  return layer;
}

Layer build(const Subject& s, uint64_t salt = 0) {
  Layer layer = build_plain(s.spec, s.options.d_model, s.options.seed + salt);
  randomise_state(*layer, s.options.seed + salt + 1000);
  return layer;
}

// x (B, N, D) in float64 as values, so that positions can be changed before making the tensor.
std::vector<double> input_values(int64_t b, int64_t n, int64_t d, uint64_t seed) {
  Generator gen(seed);
  return randn({b, n, d}, gen, kFloat64).to_vector<double>();
}

Tensor input(int64_t b, int64_t n, int64_t d, uint64_t seed) { return from_vector(input_values(b, n, d, seed), {b, n, d}); }

// max |a - b| over the rows (batch, position) of (B, N, D) tensors for which `keep(b, n)`,
// relative to 1 + max |b| over the same rows.
double row_difference(const Tensor& a, const Tensor& b, const std::function<bool(int64_t, int64_t)>& keep) {
  if (a.shape() != b.shape()) fail<ShapeError>("outputs of shapes {} and {}", to_string(a.shape()), to_string(b.shape()));
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  const int64_t B = a.size(0), N = a.size(1), D = a.size(2);
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < B; ++i)
    for (int64_t n = 0; n < N; ++n) {
      if (!keep(i, n)) continue;
      for (int64_t j = (i * N + n) * D; j < (i * N + n + 1) * D; ++j) {
        diff = std::max(diff, std::isnan(x[j]) || std::isnan(y[j]) ? INFINITY : std::abs(x[j] - y[j]));
        scale = std::max(scale, std::abs(y[j]));
      }
    }
  return diff / (1 + scale);
}

double difference(const Tensor& a, const Tensor& b) {
  return row_difference(a, b, [](int64_t, int64_t) { return true; });
}

bool all_finite(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

// The message of the attnlab error `f` throws, or nullopt when it runs. Another exception, or an
// attnlab error whose message does not name the variant, is rethrown as a failure.
std::optional<std::string> rejection(const Subject& s, const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find(s.variant) == std::string::npos)
      fail<ValueError>("rejected with an error that does not name the variant {}: {}", s.variant, what);
    return what;
  }
  return std::nullopt;
}

// (B, 1, 1, N) key padding: batch b pads its last b + 1 keys.
std::vector<bool> padding(int64_t b, int64_t n) {
  std::vector<bool> v(b * n, true);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t m = std::max<int64_t>(1, n - 1 - i); m < n; ++m) v[i * n + m] = false;
  return v;
}

// A mask with fully masked query rows: `allowed` (B, 1, N|1, N) and the rows that allow nothing.
struct EmptyRowMask {
  Tensor allowed;
  std::vector<bool> empty;  // (B, N)
  std::string kind;
};

// (B, 1, N, N): random keys allowed, the diagonal always (so that every pattern and causal keep
// some key), except row 1 of the last batch, which allows nothing.
EmptyRowMask query_mask(int64_t b, int64_t n, uint64_t seed) {
  Generator gen(seed);
  const auto u = rand({b, n, n}, gen, kFloat64).to_vector<double>();
  std::vector<bool> v(b * n * n), empty(b * n, false);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t q = 0; q < n; ++q)
      for (int64_t m = 0; m < n; ++m) v[(i * n + q) * n + m] = q == m || u[(i * n + q) * n + m] < 0.6;
  for (int64_t m = 0; m < n; ++m) v[((b - 1) * n + 1) * n + m] = false;
  empty[(b - 1) * n + 1] = true;
  return {from_vector(v, {b, 1, n, n}), empty, "a query mask with one empty row"};
}

// (B, 1, 1, N): the last batch allows no key at all (for variants that take key masks only).
EmptyRowMask all_keys_mask(int64_t b, int64_t n) {
  std::vector<bool> v(b * n, true), empty(b * n, false);
  for (int64_t m = 0; m < n; ++m) v[(b - 1) * n + m] = false, empty[(b - 1) * n + m] = true;
  return {from_vector(v, {b, 1, 1, n}), empty, "a key mask that masks every key of the last batch"};
}

// The empty-row mask the layer takes (a query mask, else a key mask), or a Skip.
EmptyRowMask accepted_empty_row_mask(const Subject& s, nn::Attention& layer, const Tensor& x) {
  if (s.caps.query_mask == Support::no && s.caps.key_mask == Support::no)
    throw Skip{"declares no mask (the capabilities of its schema)"};
  if (s.caps.query_mask != Support::no) {
    EmptyRowMask q = query_mask(x.size(0), s.n, s.options.seed + 7);
    auto no_query = rejection(s, [&] { layer.forward(x, {}, q.allowed); });
    if (!no_query) return q;
    if (s.caps.query_mask == Support::yes) rejected(Support::yes, "query mask", *no_query);
  }
  EmptyRowMask k = all_keys_mask(x.size(0), s.n);
  auto no_key = rejection(s, [&] { layer.forward(x, {}, k.allowed); });
  if (!no_key) return k;
  rejected(s.caps.key_mask, "mask", *no_key);
}

std::string fmt_diff(double d) { return fmt::format("{:.2g}", d); }

void require_close(const Subject& s, double diff, const std::string& what) {
  if (!(diff <= s.options.tolerance))
    fail<ValueError>("{}: they differ by {} (relative), above the tolerance {}", what, fmt_diff(diff), s.options.tolerance);
}

// ---- the checks ----

std::string check_spec(const Subject& s) {
  Layer a = build(s);
  const std::string pinned = a->spec();
  Layer b = build_plain(pinned, s.options.d_model, s.options.seed);
  if (b->spec() != pinned) fail<ValueError>("spec() {} rebuilds as {}", pinned, b->spec());
  const TensorMap sa = a->state_dict(), sb = b->state_dict();
  for (const auto& [name, t] : sa) {
    auto it = sb.find(name);
    if (it == sb.end()) fail<ValueError>("{} is missing from the layer rebuilt from spec() {}", name, pinned);
    if (it->second.shape() != t.shape())
      fail<ValueError>("{} is {} in the layer and {} rebuilt from spec()", name, to_string(t.shape()),
                       to_string(it->second.shape()));
  }
  if (sa.size() != sb.size()) fail<ValueError>("the layer rebuilt from spec() has {} tensors, not {}", sb.size(), sa.size());
  return fmt::format("{} rebuilds with the same {} tensors", pinned, sa.size());
}

std::string check_shape(const Subject& s) {
  Layer a = build(s);
  const int64_t D = s.options.d_model;
  std::string seen;
  for (auto [b, n] : {std::pair<int64_t, int64_t>{1, s.n_long}, {2, s.n}}) {
    auto r = a->forward(input(b, n, D, s.options.seed + 1), {}, {}, false, true);
    const Dims want{b, n, D};
    if (r.output.shape() != want)
      fail<ShapeError>("input ({}, {}, {}) gives output {}", b, n, D, to_string(r.output.shape()));
    if (!all_finite(r.output)) fail<ValueError>("output of ({}, {}, {}) is not finite", b, n, D);
    if (r.attention.defined()) {
      const Dims& p = r.attention.shape();
      if (p.size() != 4 || p[0] != b || p[2] != n || p[3] != n)
        fail<ShapeError>("attention is {}, expected (B={}, h, N={}, M={})", to_string(p), b, n, n);
      if (!all_finite(r.attention)) fail<ValueError>("attention of ({}, {}, {}) is not finite", b, n, D);
    }
    seen += fmt::format("{}({}, {}, {}){}", seen.empty() ? "" : ", ", b, n, D, r.attention.defined() ? " with attention" : "");
  }
  return "output (B, N, D), finite: " + seen;
}

using Forward = std::function<Tensor(const Tensor&)>;
using Rows = std::function<bool(int64_t, int64_t)>;

// Changes x at the positions `moved(b, n)` and compares the other rows of `f`'s output.
double perturbed_difference(const Forward& f, const std::vector<double>& x, const Dims& shape, const Rows& moved,
                            uint64_t seed) {
  std::vector<double> y = x;
  Generator gen(seed);
  const auto noise = randn(shape, gen, kFloat64).to_vector<double>();
  const int64_t N = shape[1], D = shape[2];
  for (size_t j = 0; j < y.size(); ++j) {
    const int64_t row = int64_t(j) / D;
    if (moved(row / N, row % N)) y[j] += 3 * noise[j];
  }
  Tensor before = f(from_vector(x, shape));
  Tensor after = f(from_vector(y, shape));
  return row_difference(after, before, [&](int64_t b, int64_t n) { return !moved(b, n); });
}

double perturbed_difference(nn::Attention& a, const std::vector<double>& x, const Dims& shape, const Tensor& mask,
                            bool causal, const Rows& moved, uint64_t seed) {
  return perturbed_difference([&](const Tensor& in) { return a.forward(in, {}, mask, causal).output; }, x, shape,
                              moved, seed);
}

// The accepted lengths the checks that move inputs run at: the shortest and the second.
std::vector<int64_t> lengths(const Subject& s) {
  return s.n_long == s.n ? std::vector<int64_t>{s.n} : std::vector<int64_t>{s.n, s.n_long};
}

// Key masks (2, 1, 1, N) that the key_mask and causal_key_mask checks apply, each with a name:
// tail padding (batch b pads its last b + 1 keys), the second half (batch 0) and the last quarter
// (batch 1), and holes (every third key), so that variants working in blocks see whole blocks and
// partial ones masked. Key 0 stays allowed.
std::vector<std::pair<std::string, std::vector<bool>>> key_paddings(int64_t n) {
  std::vector<bool> half(2 * n, true), holes(2 * n, true);
  for (int64_t m = std::max<int64_t>(1, n / 2); m < n; ++m) half[m] = false;
  for (int64_t m = std::max<int64_t>(1, n - n / 4); m < n; ++m) half[n + m] = false;
  for (int64_t m = 1; m < n; ++m) holes[m] = m % 3 != 2, holes[n + m] = m % 3 != 1;
  return {{"tail", padding(2, n)}, {"half", half}, {"holes", holes}};
}

std::string check_key_mask(const Subject& s) {
  require(s.caps.key_mask, "key mask");
  require_isolation(s);
  Layer a = build(s);
  double d = 0;
  std::vector<std::string> seen;
  for (int64_t n : lengths(s)) {
    const Dims shape{2, n, s.options.d_model};
    const std::vector<double> x = input_values(2, n, s.options.d_model, s.options.seed + 2);
    for (const auto& [kind, pad] : key_paddings(n)) {
      const Tensor mask = from_vector(pad, {2, 1, 1, n});
      if (auto no = rejection(s, [&] { a->forward(from_vector(x, shape), {}, mask); })) rejected(s.caps.key_mask, "key mask", *no);
      auto masked = [&](int64_t b, int64_t m) { return !pad[b * n + m]; };
      d = std::max(d, perturbed_difference(*a, x, shape, mask, false, masked, s.options.seed + 3));
      require_close(s, d, fmt::format("N={}, {} padding: the unmasked rows moved when the masked positions' inputs changed",
                                      n, kind));
    }
    seen.push_back(std::to_string(n));
  }
  return fmt::format("key padding (tail, half, holes) at N = {}: the other rows do not move when masked positions change "
                     "(difference {})",
                     fmt::join(seen, ", "), fmt_diff(d));
}

std::string check_causal(const Subject& s) {
  require(s.caps.causal, "causal");
  require_isolation(s);
  if (!s.causal) rejected(s.caps.causal, "causal", s.causal_error);
  Layer a = build(s);
  const Dims shape{2, s.n, s.options.d_model};
  const std::vector<double> x = input_values(2, s.n, s.options.d_model, s.options.seed + 4);
  const int64_t cut = s.n / 2;
  auto future = [&](int64_t, int64_t n) { return n >= cut; };
  const double d = perturbed_difference(*a, x, shape, {}, true, future, s.options.seed + 5);
  require_close(s, d, fmt::format("rows before {} moved when positions {}.. changed", cut, cut));
  return fmt::format("rows 0..{} do not move when positions {}..{} change (difference {})", cut - 1, cut, s.n - 1,
                     fmt_diff(d));
}

// Causal with a key mask: changing the masked positions and every position from a cut on moves
// no earlier unmasked row, for cuts 1, N/2 and N-1, at each length and key padding.
std::string check_causal_key_mask(const Subject& s) {
  require(both(s.caps.causal, s.caps.key_mask), "causal with a key mask");
  require_isolation(s);
  if (!s.causal) rejected(s.caps.causal, "causal", s.causal_error);
  Layer a = build(s);
  double d = 0;
  int64_t tried = 0;
  for (int64_t n : lengths(s)) {
    const Dims shape{2, n, s.options.d_model};
    const std::vector<double> x = input_values(2, n, s.options.d_model, s.options.seed + 20);
    for (const auto& [kind, pad] : key_paddings(n)) {
      const Tensor mask = from_vector(pad, {2, 1, 1, n});
      if (auto no = rejection(s, [&] { a->forward(from_vector(x, shape), {}, mask, true); }))
        rejected(s.caps.key_mask, "key mask with causal", *no);
      for (int64_t cut : {int64_t(1), n / 2, n - 1}) {
        auto moved = [&](int64_t b, int64_t m) { return m >= cut || !pad[b * n + m]; };
        d = std::max(d, perturbed_difference(*a, x, shape, mask, true, moved, s.options.seed + 21 + cut));
        require_close(s, d, fmt::format("N={}, {} padding, causal: rows before {} moved when positions {}.. or masked "
                                        "ones changed",
                                        n, kind, cut, cut));
        ++tried;
      }
    }
  }
  return fmt::format("{} cases (lengths, tail/half/holes padding, cuts 1, N/2, N-1): no earlier unmasked row moves when "
                     "later or masked positions change (difference {})",
                     tried, fmt_diff(d));
}

// Segment ids (2, N) of packed rows: batch 0 holds documents [0, N/4), [N/4, 3N/4), [3N/4, N),
// batch 1 [0, N/2), [N/2, N).
std::vector<int64_t> packed_ids(int64_t n) {
  std::vector<int64_t> ids(2 * n);
  for (int64_t m = 0; m < n; ++m) {
    ids[m] = (m >= n / 4) + (m >= 3 * n / 4);
    ids[n + m] = m >= n / 2;
  }
  return ids;
}

// Packed rows (forward_packed): changing the inputs of one parity of documents moves no row of
// the other parity's documents, plain and causal; with causal also, changing the positions from a
// cut on (each document boundary and N/2) moves no earlier row.
std::string check_segments(const Subject& s) {
  require(s.caps.segments, "segment ids");
  require_isolation(s);
  Layer a = build(s);
  double d = 0;
  int64_t tried = 0;
  for (int64_t n : lengths(s)) {
    const Dims shape{2, n, s.options.d_model};
    const std::vector<int64_t> ids = packed_ids(n);
    const Tensor segment_ids = from_vector(ids, {2, n});
    const std::vector<double> x = input_values(2, n, s.options.d_model, s.options.seed + 30);
    if (auto no = rejection(s, [&] { a->forward_packed(from_vector(x, shape), segment_ids); }))
      rejected(s.caps.segments, "segment ids", *no);
    std::vector<bool> modes{false};
    if (s.causal) modes.push_back(true);
    for (bool causal : modes) {
      auto f = [&](const Tensor& in) { return a->forward_packed(in, segment_ids, {}, causal).output; };
      for (int64_t parity : {0, 1}) {
        auto moved = [&](int64_t b, int64_t m) { return ids[b * n + m] % 2 == parity; };
        d = std::max(d, perturbed_difference(f, x, shape, moved, s.options.seed + 31 + parity));
        require_close(s, d, fmt::format("N={}{}: rows of documents {} moved when the other documents' inputs changed", n,
                                        causal ? ", causal" : "", parity ? "0 and 2" : "1"));
        ++tried;
      }
      if (!causal) continue;
      for (int64_t cut : {n / 4, n / 2, 3 * n / 4}) {
        if (cut < 1) continue;
        auto future = [&](int64_t, int64_t m) { return m >= cut; };
        d = std::max(d, perturbed_difference(f, x, shape, future, s.options.seed + 33 + cut));
        require_close(s, d, fmt::format("N={}, causal: rows before {} moved when positions {}.. changed", n, cut, cut));
        ++tried;
      }
    }
  }
  return fmt::format("{} cases (lengths, other documents{}): no row moves when another document's{} inputs change "
                     "(difference {})",
                     tried, s.causal ? ", causal, cuts at N/4, N/2, 3N/4" : "", s.causal ? " or a later position's" : "",
                     fmt_diff(d));
}

std::string check_masked_row(const Subject& s) {
  Layer a = build(s);
  Tensor x = input(2, s.n, s.options.d_model, s.options.seed + 6);
  EmptyRowMask m = accepted_empty_row_mask(s, *a, x);
  auto r = a->forward(x, {}, m.allowed, false, true);
  if (!all_finite(r.output)) fail<ValueError>("output with {} is not finite", m.kind);
  // The rule: a row with no allowed key equals what the layer gives when every head outputs
  // zero. That output (out_proj's bias and whatever follows the heads) is the layer's with
  // head_mask = 0, so a variant that takes masks needs the buffer head_mask.
  Tensor head_mask;
  for (auto& [name, b] : a->named_buffers())
    if (name == "head_mask") head_mask = b;
  if (!head_mask.defined())
    fail<ValueError>("no buffer head_mask: a variant that takes masks registers head_mask (h), ones, and multiplies "
                     "head i's output by head_mask[i] before its output projection, so that the output of all-zero "
                     "heads, which a fully masked row must equal, is defined (docs/attention.md, \"Adding a variant\")");
  Tensor want;
  {
    NoGradGuard no_grad;
    kernels::copy_(head_mask, zeros_like(head_mask));
    want = a->forward(x).output;
  }
  auto empty = [&](int64_t b, int64_t n) { return bool(m.empty[b * s.n + n]); };
  const double d = row_difference(r.output, want, empty);
  require_close(s, d, fmt::format("fully masked rows ({}) differ from the output of all-zero heads (head_mask = 0)",
                                  m.kind));
  std::string att = "no attention returned";
  if (r.attention.defined()) {
    const auto p = r.attention.to_vector<double>();
    const int64_t B = r.attention.size(0), H = r.attention.size(1), N = r.attention.size(2), M = r.attention.size(3);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t k = 0; k < M; ++k)
            if (m.empty[b * s.n + n] && p[((b * H + h) * N + n) * M + k] != 0)
              fail<ValueError>("attention[{}, {}, {}, {}] = {} in a fully masked row", b, h, n, k, p[((b * H + h) * N + n) * M + k]);
    att = "their attention rows are zero";
  }
  return fmt::format("{}: those rows equal the output of all-zero heads ({}); {}", m.kind, fmt_diff(d), att);
}

// Cross-attention where the layer takes a context (B, M, D), M != N: output (B, N, D); with a key
// padding mask on the context, changing its masked rows moves no output; gradcheck of x and the
// context (the parameters are checked on self-attention).
std::string check_cross(const Subject& s) {
  require(s.caps.cross, "cross-attention");
  if (s.n_long == s.n) throw Skip{"needs two accepted lengths for N != M"};
  Layer a = build(s);
  const int64_t D = s.options.d_model, N = s.n, M = s.n_long;
  Tensor x = input(2, N, D, s.options.seed + 14);
  const std::vector<double> c = input_values(2, M, D, s.options.seed + 15);
  const Dims cshape{2, M, D};
  Tensor y;
  if (auto no = rejection(s, [&] { y = a->forward(x, from_vector(c, cshape)).output; }))
    rejected(s.caps.cross, "context", *no);
  if (y.shape() != Dims{2, N, D} || !all_finite(y))
    fail<ShapeError>("context ({}, {}, {}) gives output {}{}", 2, M, D, to_string(y.shape()), all_finite(y) ? "" : ", not finite");
  std::string masked = "no key mask";
  const std::vector<bool> pad = padding(2, M);
  const Tensor mask = from_vector(pad, {2, 1, 1, M});
  if (!rejection(s, [&] { a->forward(x, from_vector(c, cshape), mask); })) {
    std::vector<double> moved = c;
    Generator gen(s.options.seed + 16);
    const auto noise = randn(cshape, gen, kFloat64).to_vector<double>();
    for (size_t j = 0; j < moved.size(); ++j) {
      const int64_t row = int64_t(j) / D;
      if (!pad[row]) moved[j] += 3 * noise[j];
    }
    const double d = difference(a->forward(x, from_vector(moved, cshape), mask).output,
                                a->forward(x, from_vector(c, cshape), mask).output);
    require_close(s, d, "the output moved when masked context rows changed");
    masked = "masked context rows move nothing (" + fmt_diff(d) + ")";
  }
  Tensor cx = from_vector(c, cshape).requires_grad_();
  x.requires_grad_();
  auto fn = [&](const std::vector<Tensor>&) { return a->forward(x, cx, mask).output; };
  GradcheckOptions o;
  o.seed = s.options.seed + 17;
  o.max_elements = s.options.grad_elements;
  for (auto& [name, t] : std::vector<std::pair<std::string, Tensor>>{{"x", x}, {"context", cx}})
    if (GradcheckResult r = gradcheck(fn, {t}, o); !r) fail<ValueError>("{}: {}", name, r.message);
  return fmt::format("N={}, M={}: output (B, N, D); {}; gradcheck of x and the context", N, M, masked);
}

std::string check_state_dict(const Subject& s) {
  Layer a = build(s);
  Layer b = build_plain(a->spec(), s.options.d_model, s.options.seed + 77);
  Tensor x = input(2, s.n, s.options.d_model, s.options.seed + 8);
  auto want = a->forward(x, {}, {}, false, true);
  const double before = difference(b->forward(x).output, want.output);
  b->load_state_dict(a->state_dict());
  auto got = b->forward(x, {}, {}, false, true);
  const double d = difference(got.output, want.output);
  require_close(s, d, "the loaded layer's output and the saved layer's");
  if (want.attention.defined() && !(got.attention.defined() && difference(
                                         reshape(got.attention, {got.attention.size(0), -1, got.attention.size(3)}),
                                         reshape(want.attention, {want.attention.size(0), -1, want.attention.size(3)})) <=
                                         s.options.tolerance))
    fail<ValueError>("the loaded layer's attention differs from the saved layer's");
  return fmt::format("{} tensors into a layer built with another seed (difference {} before loading, {} after)",
                     a->state_dict().size(), fmt_diff(before), fmt_diff(d));
}

// prune_heads of every other head, in reverse order (the kept heads are reordered), against the
// layer with the other heads' head_mask at 0: plain, and with a key mask and causal where the
// layer takes them; the pruned layer's spec() rebuilds it; bad head lists are errors.
std::string check_prune(const Subject& s) {
  require(s.caps.pruning, "pruning");
  Layer a = build(s);
  Tensor head_mask;
  for (auto& [name, b] : a->named_buffers())
    if (name == "head_mask") head_mask = b;
  if (!head_mask.defined()) rejected(s.caps.pruning, "pruning", "no head_mask buffer");
  const int64_t h = head_mask.numel();
  if (h < 2) throw Skip{"one head"};
  std::vector<int64_t> keep;
  for (int64_t i = h - 1; i >= 0; i -= 2) keep.push_back(i);  // h-1, h-3, ...
  Layer pruned;
  if (auto no = rejection(s, [&] { pruned = a->prune_heads(keep); })) rejected(s.caps.pruning, "prune_heads", *no);
  pruned->to(kFloat64);
  pruned->eval();
  for (const std::vector<int64_t>& bad : {std::vector<int64_t>{0, h}, std::vector<int64_t>{0, 0}, std::vector<int64_t>{}})
    if (!rejection(s, [&] { a->prune_heads(bad); }))
      fail<ValueError>("prune_heads({}) of {} heads is not an error", fmt::join(bad, ", "), h);
  {
    NoGradGuard no_grad;
    std::vector<double> v = head_mask.to_vector<double>();
    for (int64_t i = 0; i < h; ++i)
      if (std::find(keep.begin(), keep.end(), i) == keep.end()) v[i] = 0;
    kernels::copy_(head_mask, from_vector(v, head_mask.shape()));
  }
  Tensor x = input(2, s.n, s.options.d_model, s.options.seed + 9);
  const Tensor pad = from_vector(padding(2, s.n), {2, 1, 1, s.n});
  const bool masks = s.caps.key_mask != Support::no && !rejection(s, [&] { a->forward(x, {}, pad); });
  Layer rebuilt = build_plain(pruned->spec(), s.options.d_model, s.options.seed + 5);
  rebuilt->load_state_dict(pruned->state_dict());
  double d = 0;
  for (const Tensor& mask : {Tensor(), masks ? pad : Tensor()})
    for (bool causal : {false, s.causal}) {
      const Tensor want = a->forward(x, {}, mask, causal).output;
      d = std::max({d, difference(pruned->forward(x, {}, mask, causal).output, want),
                    difference(rebuilt->forward(x, {}, mask, causal).output, want)});
    }
  require_close(s, d, fmt::format("prune_heads({}) (or the layer rebuilt from its spec) and the masked layer",
                                  fmt::join(keep, ", ")));
  return fmt::format("heads {} of {} kept, and its spec() rebuilt: equal to the masked layer{}{} ({}); {}",
                     fmt::join(keep, ", "), h, masks ? ", also with a key mask" : "", s.causal ? ", also causal" : "",
                     fmt_diff(d), pruned->spec());
}

// Gradcheck of x and of every parameter, one tensor at a time so that a failure names it.
std::string gradcheck_all(const Subject& s, nn::Attention& a, const Tensor& x, const Tensor& mask, bool causal) {
  auto fn = [&](const std::vector<Tensor>&) { return a.forward(x, {}, mask, causal).output; };
  GradcheckOptions o;
  o.seed = s.options.seed + 10;
  o.max_elements = s.options.grad_elements;
  std::vector<std::pair<std::string, Tensor>> tensors{{"x", x}};
  for (auto& [name, p] : a.named_parameters())
    if (p.requires_grad()) tensors.emplace_back(name, p);
  for (auto& [name, t] : tensors) {
    GradcheckResult r = gradcheck(fn, {t}, o);
    if (!r) fail<ValueError>("{}: {}", name, r.message);
  }
  return fmt::format("x and {} parameters (at most {} elements each)", tensors.size() - 1, o.max_elements);
}

std::string check_gradcheck(const Subject& s) {
  Layer a = build(s);
  Tensor x = input(2, s.n, s.options.d_model, s.options.seed + 11).requires_grad_();
  return gradcheck_all(s, *a, x, {}, false);
}

std::string check_gradcheck_masked(const Subject& s) {
  Layer a = build(s);
  Tensor x = input(2, s.n, s.options.d_model, s.options.seed + 12);
  EmptyRowMask m = accepted_empty_row_mask(s, *a, x);
  x.requires_grad_();
  return gradcheck_all(s, *a, x, m.allowed, s.causal) + fmt::format(", {}{}", m.kind, s.causal ? ", causal" : "");
}

// forward_step's contract: each step's rows equal the last rows of a causal forward over every
// position so far (not of the whole sequence: mha's default sigmoid_bias -log M depends on M).
std::string check_forward_step(const Subject& s) {
  require(s.caps.decoding, "decoding (forward_step)");
  if (!s.causal) rejected(s.caps.decoding, "forward_step", "not causal: " + s.causal_error);
  Layer a = build(s);
  Tensor x = input(2, s.n, s.options.d_model, s.options.seed + 13);  // (2, N, D)
  std::vector<int64_t> chunks{1, std::min<int64_t>(2, s.n - 1)};
  if (s.n > 3) chunks.push_back(s.n - 3);
  std::unique_ptr<nn::AttentionCache> cache;
  int64_t at = 0;
  double d = 0;
  for (int64_t t : chunks) {
    if (t <= 0) continue;
    Tensor got;
    auto no = rejection(s, [&] {
      if (!cache) cache = a->make_cache(2, s.n);
      got = a->forward_step(narrow(x, 1, at, t), *cache);  // (2, t, D)
    });
    if (no) {
      if (at == 0) rejected(s.caps.decoding, "forward_step at these lengths", *no);
      fail<ValueError>("forward_step failed after {} positions: {}", at, *no);
    }
    Tensor want = narrow(a->forward(narrow(x, 1, 0, at + t), {}, {}, true).output, 1, at, t);  // (2, t, D)
    d = std::max(d, difference(got, want));
    require_close(s, d, fmt::format("forward_step's rows {}..{} and the causal forward's", at, at + t - 1));
    at += t;
  }
  if (cache->length != at) fail<ValueError>("the cache reports {} positions after {}", cache->length, at);
  return fmt::format("steps of {} positions equal the causal forward over the positions so far ({})",
                     fmt::join(chunks, ", "), fmt_diff(d));
}

// The value of each option type that no schema allows.
std::optional<std::string> bad_value(const nn::OptionSchema& o) {
  switch (o.type) {
    case nn::OptionType::Int: return "1.5";
    case nn::OptionType::Double: return "not_a_number";
    case nn::OptionType::Bool: return "maybe";
    case nn::OptionType::Choice: return "no_such_choice";
    case nn::OptionType::List: return o.choices.empty() ? std::nullopt : std::optional<std::string>("no_such_item");
    case nn::OptionType::IntList: return "1+x";
  }
  return std::nullopt;
}

std::string check_bad_options(const Subject& s) {
  const nn::Spec given = nn::parse_spec(s.spec);
  const nn::VariantSchema* schema = nullptr;
  for (const auto& v : nn::variants())
    if (v.schema.name == given.name) schema = &v.schema;
  // The given spec with option `name` set to `value`.
  auto with = [&](const std::string& name, const std::string& value) {
    nn::Spec spec{given.name, {}};
    for (const auto& [n, v] : given.options)
      if (n != name) spec.options.emplace_back(n, v);
    spec.options.emplace_back(name, value);
    return nn::to_string(spec);
  };
  // The error must name the variant, the option and (for a known option) the value.
  auto expect_rejected = [&](const std::string& name, const std::string& value, bool known = true) {
    const std::string text = with(name, value);
    std::string what;
    try {
      nn::make_attention(text, s.options.d_model);
    } catch (const ValueError& e) {
      what = e.what();
    }
    if (what.empty()) fail<ValueError>("{} builds; expected a ValueError naming {}", text, name);
    for (const std::string& part : {s.variant, name, known ? value : name})
      if (what.find(part) == std::string::npos) fail<ValueError>("{}: the error does not name {}: {}", text, part, what);
  };
  expect_rejected("no_such_option", "1", false);
  int64_t tried = 1;
  for (const nn::OptionSchema& o : schema->options)
    if (auto v = bad_value(o)) {
      expect_rejected(o.name, *v);
      ++tried;
    }
  return fmt::format("{} bad specs (an unknown option; per option an ill-typed value or one outside its choices) "
                     "are ValueErrors naming the variant, the option and the value",
                     tried);
}

using CheckFn = std::string (*)(const Subject&);

const std::vector<std::pair<std::string, CheckFn>>& checks() {
  static const std::vector<std::pair<std::string, CheckFn>> all = {
      {"spec", check_spec},
      {"shape", check_shape},
      {"key_mask", check_key_mask},
      {"causal", check_causal},
      {"causal_key_mask", check_causal_key_mask},
      {"segments", check_segments},
      {"masked_row", check_masked_row},
      {"cross", check_cross},
      {"state_dict", check_state_dict},
      {"prune_heads", check_prune},
      {"gradcheck", check_gradcheck},
      {"gradcheck_masked", check_gradcheck_masked},
      {"forward_step", check_forward_step},
      {"bad_options", check_bad_options},
  };
  return all;
}

// Builds the layer and finds the lengths it takes and whether it can be causal; the "build" result.
CheckResult probe(Subject& s) {
  CheckResult r{"build", false, "", false};
  Layer a;
  try {
    a = build(s);
  } catch (const std::exception& e) {
    r.detail = e.what();
    return r;
  }
  std::vector<int64_t> candidates = s.options.lengths;
  if (candidates.empty()) candidates = {4, 6, 8, 12, 16, 24, 32, 48, 64, 128};
  std::vector<int64_t> ok;
  std::string last_error;
  for (int64_t n : candidates) {
    if (ok.size() == 2) break;
    try {
      a->forward(input(1, n, s.options.d_model, s.options.seed));
      ok.push_back(n);
    } catch (const Error& e) {
      last_error = e.what();
    }
  }
  if (ok.empty()) {
    r.detail = fmt::format("no length of {} is accepted: {}", fmt::join(candidates, ", "), last_error);
    return r;
  }
  s.n = ok[0];
  s.n_long = ok.back();
  try {
    a->forward(input(1, s.n, s.options.d_model, s.options.seed), {}, {}, true);
    s.causal = true;
  } catch (const Error& e) {
    s.causal = false;
    s.causal_error = e.what();
  }
  if (s.causal && s.caps.causal == Support::no) {
    r.detail = fmt::format("{} declares no causal in its capabilities, but forward(..., causal=true) runs", a->spec());
    return r;
  }
  r.passed = true;
  r.detail = fmt::format("{} at d_model {}; lengths {}{}", a->spec(), s.options.d_model, fmt::join(ok, ", "),
                         s.causal ? "; causal" : "; not causal");
  return r;
}

}  // namespace

const std::vector<std::string>& check_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v{"build"};
    for (const auto& [name, fn] : checks()) v.push_back(name);
    return v;
  }();
  return names;
}

std::vector<CheckResult> check_variant(const std::string& spec, const CheckOptions& options) {
  Subject s{spec, nn::parse_spec(spec).name, options};
  s.caps = nn::registered_schema(s.variant).capabilities;  // the registry's error, listing the known names
  std::vector<CheckResult> results{probe(s)};
  if (!results[0].passed) return results;
  for (const auto& [name, fn] : checks()) {
    CheckResult r{name, false, "", false};
    if (options.skip.count(name)) {
      r.passed = r.skipped = true;
      r.detail = "skipped by the caller";
    } else {
      try {
        r.detail = fn(s);
        r.passed = true;
      } catch (const Skip& skip) {
        r.passed = r.skipped = true;
        r.detail = skip.why;
      } catch (const std::exception& e) {
        r.detail = e.what();
      }
    }
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace attnlab::check
