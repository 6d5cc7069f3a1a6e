// local, sparse_strided, sparse_fixed, dilated: each variant's rule, its decomposition into
// tile_attention parts, and the forward pass they share (project, run the parts, merge by
// log-sum-exp, finish). Why the decompositions are exact: every part is a disjoint subset of
// the allowed (n, m) pairs, and a softmax over a union of disjoint key sets is the parts'
// softmaxes weighted by softmax_p(lse_p).
#include "nn/attention/patterns.hpp"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "nn/attention/mha.hpp"

namespace attnlab::nn {
namespace {

// Positions [0, n) grouped by p mod d, increasing inside each group: group r holds kernel rows
// [start[r], start[r + 1]), and row start[r] + t is position r + t d.
struct Groups {
  std::vector<int64_t> rows;   // (n) the position of each kernel row
  std::vector<int64_t> start;  // (d + 1)
};
Groups by_residue(int64_t n, int64_t d) {
  Groups g;
  g.rows.reserve(n);
  g.start.assign(d + 1, 0);
  for (int64_t r = 0; r < d; ++r) {
    g.start[r] = int64_t(g.rows.size());
    for (int64_t p = r; p < n; p += d) g.rows.push_back(p);
  }
  g.start[d] = n;
  return g;
}

// A band part on identity positions: row n attends [n - before, n + after] within [0, m),
// and with causal only up to n.
PatternAttention::Part band_part(int64_t n, int64_t m, int64_t before, int64_t after, bool causal) {
  PatternAttention::Part part;
  part.pattern.lo.resize(n);
  part.pattern.hi.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t lo = std::clamp(i - before, int64_t{0}, m);
    int64_t hi = std::clamp(i + after + 1, lo, m);
    if (causal) hi = std::max(lo, std::min(hi, i + 1));
    part.pattern.lo[i] = lo;
    part.pattern.hi[i] = hi;
  }
  return part;
}

bool all_empty(const TilePattern& p) {
  for (size_t i = 0; i < p.lo.size(); ++i)
    if (p.lo[i] < p.hi[i] && !(!p.ex_lo.empty() && p.ex_lo[i] <= p.lo[i] && p.ex_hi[i] >= p.hi[i])) return false;
  return true;
}

// Tiles near the band width: a narrow band wastes less of each score tile on small tiles, and
// a wide one amortises the BLAS calls on large ones.
int64_t tile_for_band(int64_t width) { return std::clamp<int64_t>(width, 16, 64); }

VariantSchema pattern_schema(std::string name, std::string summary, std::vector<OptionSchema> own, std::string time,
                             std::string memory, bool causal_default) {
  VariantSchema s{std::move(name), std::move(summary), multihead_options(), std::move(time), std::move(memory)};
  for (OptionSchema& o : s.options)
    if (o.name == "causal" && causal_default) {
      o.default_value = "true";
      o.doc = "allow only m <= n (default true for this variant)";
    }
  s.options.insert(s.options.begin(), own.begin(), own.end());
  s.capabilities = Capabilities::all();
  // causal=true (the default of sparse_strided and sparse_fixed) refuses a context
  if (causal_default) s.capabilities.cross = Support::probe;
  return s;
}

int64_t positive(const Options& o, const char* name) {
  const int64_t v = o.get_int(name);
  if (v <= 0) o.reject(name, "must be a positive integer");
  return v;
}

}  // namespace

// ---- the parts and their merge ----

Tensor attend_parts(std::vector<PatternPart>& parts, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& mask, TileOptions opt, const char* variant, const Tensor& segment_ids) {
  const int64_t B = q.size(0), h = q.size(1), N = q.size(2), dv = v.size(3);
  if (mask.defined()) {  // the kernel checks N and M; the batch and head dims are checked here, by name
    auto dim = [&](int d) { return mask.dim() >= d ? mask.size(-d) : 1; };
    if ((dim(4) != 1 && dim(4) != B) || (dim(3) != 1 && dim(3) != h))
      fail<ShapeError>("{}: mask of shape {} does not broadcast to (B={}, h={}, N, M)", variant,
                       to_string(mask.shape()), B, h);
  }
  auto gather = [](const Tensor& t, const std::vector<int64_t>& rows) {
    return rows.empty() ? t : index_select(t, 2, from_vector(rows));
  };
  std::vector<PatternPart*> merged, alone;  // the parts that allow something
  for (PatternPart& part : parts)
    if (!all_empty(part.pattern)) (part.alone ? alone : merged).push_back(&part);
  std::vector<char> taken(N, 0);  // rows an `alone` part owns: no other part may give them a key
  for (PatternPart* part : alone) {
    if (part->q_rows.empty()) fail<ValueError>("{}: internal: a part computed alone needs its q_rows", variant);
    for (int64_t n : part->q_rows) {
      if (taken[n]) fail<ValueError>("{}: internal: query {} is in two parts computed alone", variant, n);
      taken[n] = 1;
    }
  }
  for (PatternPart* part : merged)
    for (size_t i = 0; i < part->pattern.lo.size(); ++i)
      if (taken[part->q_rows.empty() ? int64_t(i) : part->q_rows[i]] && part->pattern.lo[i] < part->pattern.hi[i])
        fail<ValueError>("{}: internal: a query of a part computed alone gets keys from another part", variant);

  auto run = [&](PatternPart& part, bool need_lse) {
    part.pattern.q_pos = part.q_rows;
    part.pattern.k_pos = part.k_rows;
    part.pattern.mask = mask;
    part.pattern.q_segments = part.pattern.k_segments = segment_ids;  // read at the raw positions
    opt.q_tile = opt.k_tile = part.tile;
    opt.need_lse = need_lse;
    return tile_attention(part.q.defined() ? part.q : gather(q, part.q_rows),
                          part.k.defined() ? part.k : gather(k, part.k_rows),
                          part.v.defined() ? part.v : gather(v, part.k_rows), part.pattern, opt);
  };
  std::vector<Tensor> outs, lses;
  for (PatternPart* part : merged) {
    TileAttentionResult r = run(*part, merged.size() > 1);
    if (!part->q_rows.empty()) {  // back to position order; row R (a zero output, lse -inf) for the queries left out
      const int64_t R = int64_t(part->q_rows.size());
      std::vector<int64_t> back(N, R);
      for (int64_t i = 0; i < R; ++i) back[part->q_rows[i]] = i;
      if (R < N) {
        r.out = cat({r.out, zeros({B, h, 1, dv}, r.out.dtype())}, 2);                      // (B, h, R + 1, dv)
        if (r.lse.defined()) r.lse = cat({r.lse, full({B, h, 1}, -INFINITY, r.lse.dtype())}, 2);  // (B, h, R + 1)
      }
      r.out = gather(r.out, back);
      if (r.lse.defined()) r.lse = gather(r.lse, back);
    }
    outs.push_back(r.out);  // (B, h, N, dv)
    lses.push_back(r.lse);  // (B, h, N)
  }
  Tensor o = outs.empty() ? zeros({B, h, N, dv}, q.dtype()) : outs[0];  // (B, h, N, dv)
  if (outs.size() > 1) {
    // softmax over the parts' lse; a row that no part allows gets weight 0 everywhere (no NaN).
    Tensor L = stack(lses, -1);                   // (B, h, N, P)
    Tensor w = softmax(L, -1, ne(L, -INFINITY));  // (B, h, N, P)
    for (size_t p = 0; p < outs.size(); ++p) {
      Tensor term = unsqueeze(select(w, -1, int64_t(p)), -1) * outs[p];  // (B, h, N, dv)
      o = p == 0 ? term : o + term;
    }
  }
  if (alone.empty()) return o;
  // The rows computed alone replace theirs: one gather from (merged rows, then each alone part's).
  std::vector<Tensor> pieces = {o};
  std::vector<int64_t> src(N);
  for (int64_t n = 0; n < N; ++n) src[n] = n;
  int64_t next = N;
  for (PatternPart* part : alone) {
    pieces.push_back(run(*part, false).out);  // (B, h, R, dv)
    for (int64_t n : part->q_rows) src[n] = next++;
  }
  return gather(cat(pieces, 2), src);  // (B, h, N, dv)
}

PatternPart dilated_band(int64_t n, int64_t m, int64_t window, int64_t dilation, bool causal,
                         const std::vector<int64_t>& skip_keys, const std::vector<char>& skip_queries) {
  // Beyond max(n, m) neither the window nor the dilation changes the rule: |n - m| < L, and
  // (n - m) mod d == 0 for d >= L means n == m. Clamping keeps w d and the groups small.
  const int64_t L = std::max<int64_t>({n, m, 1});
  const int64_t w = std::min(window, L), d = std::min(dilation, L);
  auto silent = [&](int64_t i) { return !skip_queries.empty() && skip_queries[i]; };
  if (d == 1) {
    PatternPart part = band_part(n, m, w, w, causal);
    part.tile = tile_for_band(w);
    TilePattern& p = part.pattern;
    bool runs = true, excluded = false;  // runs: every row's skipped keys are consecutive positions
    p.ex_lo.assign(n, 0), p.ex_hi.assign(n, 0);
    for (int64_t i = 0; i < n && runs; ++i) {
      if (silent(i)) {
        p.hi[i] = p.lo[i];
        continue;
      }
      auto a = std::lower_bound(skip_keys.begin(), skip_keys.end(), p.lo[i]);
      auto e = std::lower_bound(a, skip_keys.end(), p.hi[i]);
      if (a == e) continue;
      const int64_t first = *a, last = *(e - 1);
      if (last - first != e - a - 1) {
        runs = false;
      } else if (first == p.lo[i]) {
        p.lo[i] = last + 1;
      } else if (last + 1 == p.hi[i]) {
        p.hi[i] = first;
      } else {
        p.ex_lo[i] = first, p.ex_hi[i] = last + 1, excluded = true;
      }
    }
    if (runs) {
      if (!excluded) p.ex_lo.clear(), p.ex_hi.clear();
      return part;
    }
  }
  // Inside residue class r the kept keys r, r + d, ... (skipped ones left out) are gathered in
  // increasing order, so a query's window [n - w d, n + w d] (causal: up to n) in its class is
  // one contiguous run of key rows, found by binary search.
  std::vector<char> skipped(m, 0);
  for (int64_t j : skip_keys) skipped[j] = 1;
  const Groups gq = by_residue(n, d);
  PatternPart part;
  part.tile = tile_for_band(w);
  if (d > 1) part.q_rows = gq.rows;
  std::vector<int64_t> key_start(d + 1, 0);
  for (int64_t r = 0; r < d; ++r) {
    key_start[r] = int64_t(part.k_rows.size());
    for (int64_t j = r; j < m; j += d)
      if (!skipped[j]) part.k_rows.push_back(j);
  }
  key_start[d] = int64_t(part.k_rows.size());
  const auto keys = part.k_rows.begin();
  TilePattern& p = part.pattern;
  p.lo.resize(n), p.hi.resize(n);
  for (int64_t r = 0; r < d; ++r)
    for (int64_t i = gq.start[r]; i < gq.start[r + 1]; ++i) {
      const int64_t pos = gq.rows[i];
      const auto first = keys + key_start[r], last = keys + key_start[r + 1];
      p.lo[i] = std::lower_bound(first, last, pos - w * d) - keys;
      p.hi[i] = std::upper_bound(first, last, causal ? pos : pos + w * d) - keys;
      if (silent(pos)) p.hi[i] = p.lo[i];
    }
  return part;
}

// ---- shared forward ----

PatternAttention::PatternAttention(std::string variant, int64_t d_model, const HeadConfig& config)
    : ProjectedAttention(std::move(variant), d_model, config) {}

AttentionResult PatternAttention::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                          bool need_weights) {
  return forward_with(x, context, mask, causal, need_weights, {});
}

AttentionResult PatternAttention::forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask,
                                                   bool causal, bool need_weights) {
  if (need_weights) return Attention::forward_segments(x, segment_ids, mask, causal, true);  // densified anyway
  return forward_with(x, {}, mask, causal, false, segment_ids);
}

AttentionResult PatternAttention::forward_with(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                               bool need_weights, const Tensor& segment_ids) {
  const char* name = variant().c_str();
  const bool is_causal = causal || config.causal;
  const Tensor& c = check_inputs(name, d_model_, x, context, is_causal);
  const int64_t N = x.size(1), M = c.size(1);
  check_mask(mask, N, M, name);
  Heads hd = project(x, c);  // q (B, h, N, dk), k (B, h, M, dk), v (B, h, M, dv)

  std::vector<Part> ps = parts(N, M, is_causal);
  TileOptions opt;
  if (is_training() && config.attn_dropout > 0) {
    opt.dropout = config.attn_dropout;
    opt.seed = gen.next_u64();  // one draw per call; the same seed in every part keeps them one dropout
  }
  Tensor o = attend_parts(ps, hd.q, hd.k, hd.v, mask, opt, name, segment_ids);  // (B, h, N, dv)

  Tensor attention;
  if (need_weights) {  // densified, O(B h N M): for analysis on small inputs
    Tensor allowed = zeros({N, M}, kBool);  // (N, M)
    bool* rule = allowed.data<bool>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m) rule[n * M + m] = allows(n, m) && (!is_causal || m <= n);
    if (mask.defined()) allowed = logical_and(mask, allowed);
    const double scale = 1.0 / std::sqrt(double(config.key_size));
    attention = softmax(matmul(hd.q, transpose(hd.k, -2, -1)) * scale, -1, allowed);  // (B, h, N, M)
  }
  return {finish(o), attention};
}

// ---- local ----

VariantSchema LocalAttention::schema() {
  return pattern_schema(
      "local", "sliding-window attention |n - m| <= window, plus sink keys m < sink_tokens (Tay et al. 2020, LRA; "
               "Xiao et al. 2024, StreamingLLM)",
      {{"window", OptionType::Int, "64", "w: keys within w positions of the query", {}},
       {"sink_tokens", OptionType::Int, "0", "s: keys 0..s-1 are attended by every query (causal: m <= n)", {}}},
      "O(B h N min(2w+1+s, M) (dk + dv)) + projections O(B (N + M) D h (dk + dv))",
      "O(B h (N + M) (dk + dv)): tiles of the band and of the sinks, never N x M", false);
}

std::shared_ptr<Attention> LocalAttention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  const int64_t s = o.get_int("sink_tokens");
  if (s < 0) o.reject("sink_tokens", "must be a non-negative integer (0 = no sinks)");
  return std::make_shared<LocalAttention>(d_model, c, positive(o, "window"), s);
}

LocalAttention::LocalAttention(int64_t d_model, const HeadConfig& config, int64_t w, int64_t s)
    : PatternAttention("local", d_model, config), window(w), sink_tokens(s) {}

bool LocalAttention::allows(int64_t n, int64_t m) const { return std::abs(n - m) <= window || m < sink_tokens; }

// Row i attends the band [lo, hi) and the sinks [0, s_i), s_i = min(s, M) (causal: also <= i + 1).
// Their union is [0, max(hi, s_i)) less the gap [s_i, lo) when the band starts after the sinks:
// one row range with one exclusion, so the kernel skips the key tiles of the gap.
std::vector<PatternAttention::Part> LocalAttention::parts(int64_t n, int64_t m, bool causal) const {
  Part band = dilated_band(n, m, window, 1, causal);
  if (sink_tokens == 0 || m == 0) return {band};
  TilePattern& p = band.pattern;
  p.ex_lo.assign(n, 0), p.ex_hi.assign(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = std::min(sink_tokens, causal ? std::min(m, i + 1) : m);
    if (p.lo[i] >= p.hi[i]) {  // no key in the window: the sinks alone
      p.lo[i] = 0, p.hi[i] = s;
      continue;
    }
    if (s < p.lo[i]) p.ex_lo[i] = s, p.ex_hi[i] = p.lo[i];
    p.lo[i] = 0;
    p.hi[i] = std::max(p.hi[i], s);
  }
  return {band};
}

void LocalAttention::own_options(OptionValues& v) const {
  v.set("window", window);
  if (sink_tokens > 0) v.set("sink_tokens", sink_tokens);
}

namespace {

struct WindowCache : AttentionCache {
  int64_t batch = 0;
  // The cached keys, in position order: the sinks [0, min(length, s)), then the window
  // [max(s, length - window), length).
  std::vector<int64_t> positions;  // (R)
  Tensor k;                        // (B, h, R, dk)
  Tensor v;                        // (B, h, R, dv)
  int64_t numel() const override { return k.defined() ? k.numel() + v.numel() : 0; }
};

}  // namespace

std::unique_ptr<AttentionCache> LocalAttention::make_cache(int64_t batch, int64_t) const {
  auto c = std::make_unique<WindowCache>();
  c->owner = this;
  c->batch = batch;
  return c;
}

// The causal rule m <= n and (n - m <= window or m < s): a query at n >= length needs the sinks,
// the `window` positions before it and the new ones up to itself, so a step keeps the sinks and
// the last `window` positions and drops the rest.
Tensor LocalAttention::forward_step(const Tensor& x_new, AttentionCache& cache) {
  auto& c = step_cache<WindowCache>(cache, "local");
  check_step("local", d_model_, x_new, c.batch, c.length, -1);
  NoGradGuard no_grad;
  const int64_t T = x_new.size(1), L = c.length;
  Heads hd = project(x_new, x_new);  // q (B, h, T, dk), k (B, h, T, dk), v (B, h, T, dv)
  Tensor k = c.k.defined() ? cat({c.k, hd.k}, 2) : hd.k;  // (B, h, R, dk), R = cached + T
  Tensor v = c.v.defined() ? cat({c.v, hd.v}, 2) : hd.v;  // (B, h, R, dv)
  std::vector<int64_t> pos = c.positions;                 // (R): key row j is position pos[j]
  for (int64_t t = 0; t < T; ++t) pos.push_back(L + t);
  const int64_t R = int64_t(pos.size());
  Tensor allowed = zeros({T, R}, kBool);  // (T, R)
  bool* a = allowed.data<bool>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < R; ++j) a[t * R + j] = pos[j] <= L + t && (L + t - pos[j] <= window || pos[j] < sink_tokens);
  const double scale = 1.0 / std::sqrt(double(config.key_size));
  Tensor p = softmax(matmul(hd.q * scale, transpose(k, -2, -1)), -1, allowed);  // (B, h, T, R)
  Tensor o = matmul(p, v);                                                       // (B, h, T, dv)
  std::vector<int64_t> keep;  // rows of the sinks and of the last `window` positions
  c.positions.clear();
  for (int64_t j = 0; j < R; ++j)
    if (pos[j] < sink_tokens || pos[j] >= L + T - window) keep.push_back(j), c.positions.push_back(pos[j]);
  Tensor rows = from_vector(keep);
  c.k = contiguous(index_select(k, 2, rows));  // (B, h, R', dk), copies so the dropped rows are freed
  c.v = contiguous(index_select(v, 2, rows));  // (B, h, R', dv)
  c.length += T;
  return finish(o);  // (B, T, D)
}

// ---- dilated ----

VariantSchema DilatedAttention::schema() {
  return pattern_schema(
      "dilated", "dilated sliding window |n - m| <= w d, (n - m) mod d == 0 (Beltagy et al. 2020)",
      {{"window", OptionType::Int, "32", "w: keys per side, counted in steps of d", {}},
       {"dilation", OptionType::Int, "2", "d: the step between attended keys", {}}},
      "O(B h N min(2w+1, M/d) (dk + dv)) + projections O(B (N + M) D h (dk + dv))",
      "O(B h (N + M) (dk + dv)): rows regrouped by n mod d (a copy of q, k, v), never N x M", false);
}

std::shared_ptr<Attention> DilatedAttention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  const int64_t w = positive(o, "window"), d = positive(o, "dilation");
  return std::make_shared<DilatedAttention>(d_model, c, w, d);
}

DilatedAttention::DilatedAttention(int64_t d_model, const HeadConfig& config, int64_t w, int64_t d)
    : PatternAttention("dilated", d_model, config), window(w), dilation(d) {}

bool DilatedAttention::allows(int64_t n, int64_t m) const {
  return std::abs(n - m) <= window * dilation && (n - m) % dilation == 0;
}

std::vector<PatternAttention::Part> DilatedAttention::parts(int64_t n, int64_t m, bool causal) const {
  // Inside residue class r, position r + t d is the class's row t, and the rule becomes a band
  // |t_n - t_m| <= w (causal: t_m <= t_n).
  return {dilated_band(n, m, window, dilation, causal)};
}

void DilatedAttention::own_options(OptionValues& v) const { v.set("window", window).set("dilation", dilation); }

// ---- sparse_strided ----

VariantSchema StridedSparseAttention::schema() {
  return pattern_schema(
      "sparse_strided", "strided sparse attention |n - m| < l or (n - m) mod l == 0 (Child et al. 2019)",
      {{"stride", OptionType::Int, "32", "l: the local band width and the stride", {}}},
      "O(B h N (2l + M/l) (dk + dv)) + projections O(B (N + M) D h (dk + dv))",
      "O(B h (N + M) (dk + dv)): a band part and one dense part per residue class mod l, never N x M", true);
}

std::shared_ptr<Attention> StridedSparseAttention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  return std::make_shared<StridedSparseAttention>(d_model, c, positive(o, "stride"));
}

StridedSparseAttention::StridedSparseAttention(int64_t d_model, const HeadConfig& config, int64_t l)
    : PatternAttention("sparse_strided", d_model, config), stride(l) {}

bool StridedSparseAttention::allows(int64_t n, int64_t m) const {
  return std::abs(n - m) < stride || (n - m) % stride == 0;
}

std::vector<PatternAttention::Part> StridedSparseAttention::parts(int64_t n, int64_t m, bool causal) const {
  // A stride beyond max(n, m) only adds empty residue classes and a band that covers every
  // pair already; clamping keeps the groups O(N) for any stride.
  const int64_t l = std::min<int64_t>(stride, std::max<int64_t>({n, m, 1}));
  std::vector<Part> out;
  Part band = band_part(n, m, l - 1, l - 1, causal);  // |n - m| < l
  band.tile = tile_for_band(l);
  out.push_back(std::move(band));
  // (n - m) mod l == 0 and |n - m| >= l: inside residue class r, every key row but the query's
  // own index t (causal: the rows before t).
  const Groups gq = by_residue(n, l), gk = by_residue(m, l);
  Part strided;
  strided.tile = tile_for_band((n + l - 1) / l);  // about one residue class per tile
  strided.q_rows = gq.rows;
  strided.k_rows = gk.rows;
  TilePattern& p = strided.pattern;
  p.lo.resize(n), p.hi.resize(n), p.ex_lo.resize(n), p.ex_hi.resize(n);
  for (int64_t r = 0; r < l; ++r) {
    const int64_t ks = gk.start[r], kc = gk.start[r + 1] - ks;
    for (int64_t i = gq.start[r]; i < gq.start[r + 1]; ++i) {
      const int64_t t = i - gq.start[r];
      p.lo[i] = ks;
      p.hi[i] = ks + (causal ? std::min(kc, t) : kc);
      p.ex_lo[i] = ks + std::min(t, kc);
      p.ex_hi[i] = ks + std::min(t + 1, kc);
    }
  }
  if (!all_empty(p)) out.push_back(std::move(strided));
  return out;
}

void StridedSparseAttention::own_options(OptionValues& v) const { v.set("stride", stride); }

// ---- sparse_fixed ----

VariantSchema FixedSparseAttention::schema() {
  return pattern_schema(
      "sparse_fixed", "fixed sparse attention: own block of l, plus the last c of every block (Child et al. 2019)",
      {{"block", OptionType::Int, "32", "l: block length", {}},
       {"summary", OptionType::Int, "4", "c: summary columns at the end of each block (0 <= c <= l)", {}}},
      "O(B h N (l + c M/l) (dk + dv)) + projections O(B (N + M) D h (dk + dv))",
      "O(B h (N + c M/l) (dk + dv)): a block part and the gathered summary keys, never N x M", true);
}

std::shared_ptr<Attention> FixedSparseAttention::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  const int64_t l = positive(o, "block"), s = o.get_int("summary");
  if (s < 0 || s > l) o.reject("summary", fmt::format("must be in [0, block={}]", l));
  return std::make_shared<FixedSparseAttention>(d_model, c, l, s);
}

FixedSparseAttention::FixedSparseAttention(int64_t d_model, const HeadConfig& config, int64_t l, int64_t c)
    : PatternAttention("sparse_fixed", d_model, config), block(l), summary(c) {}

bool FixedSparseAttention::allows(int64_t n, int64_t m) const {
  return n / block == m / block || m % block >= block - summary;
}

std::vector<PatternAttention::Part> FixedSparseAttention::parts(int64_t n, int64_t m, bool causal) const {
  const int64_t l = block, c = summary;
  std::vector<Part> out;
  Part own;  // n div l == m div l
  own.tile = tile_for_band(l);
  own.pattern.lo.resize(n);
  own.pattern.hi.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t lo = std::min(m, i / l * l);
    int64_t hi = std::min(m, i / l * l + l);
    if (causal) hi = std::max(lo, std::min(hi, i + 1));
    own.pattern.lo[i] = lo;
    own.pattern.hi[i] = hi;
  }
  out.push_back(std::move(own));
  if (c == 0) return out;
  // The summary keys m mod l >= l - c, gathered in order; those of the query's own block are
  // left to the block part. count(x) = how many summary keys lie below position x.
  Part summary_part;
  for (int64_t j = 0; j < m; ++j)
    if (j % l >= l - c) summary_part.k_rows.push_back(j);
  const int64_t S = int64_t(summary_part.k_rows.size());
  if (S == 0) return out;
  auto count = [&](int64_t x) {
    x = std::min(x, m);
    return x / l * c + std::max<int64_t>(0, x % l - (l - c));
  };
  TilePattern& p = summary_part.pattern;
  p.lo.assign(n, 0);
  p.hi.resize(n), p.ex_lo.resize(n), p.ex_hi.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t start = i / l * l;
    p.ex_lo[i] = count(start);
    p.ex_hi[i] = count(start + l);
    p.hi[i] = causal ? count(start) : S;  // causal: every earlier block's summary keys, all <= n
  }
  if (!all_empty(p)) out.push_back(std::move(summary_part));
  return out;
}

void FixedSparseAttention::own_options(OptionValues& v) const { v.set("block", block).set("summary", summary); }

}  // namespace attnlab::nn
