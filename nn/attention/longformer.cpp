// `longformer` and the gathered-block attention core it shares with `bigbird` (see the header).
//
// The core composes differentiable primitives only (index_select, matmul, masked softmax, cat,
// views), so its backward is theirs: index_select's backward is an index_add of the gathered
// gradients, linear in N like the forward. Rows are gathered along dim 0 of contiguous
// (position, B, h*d) tables, which is index_select's memcpy path.
#include "nn/attention/longformer.hpp"

#include <algorithm>
#include <cmath>

#include "autograd/ops.hpp"
#include "tensor/kernels.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::nn {
namespace {

// Reads a bool mask broadcastable to (B, h, N, M) at (b, i, n, m); dims of size 1 broadcast.
struct MaskView {
  const bool* data = nullptr;
  int64_t batches = 1, heads = 1;
  int64_t sb = 0, sh = 0, sn = 0, sm = 0;

  MaskView(const Tensor& mask, int64_t B, int64_t h, const char* variant) {
    if (!mask.defined()) return;
    Tensor m4 = mask;
    while (m4.dim() < 4) m4 = unsqueeze(m4, 0);
    batches = m4.size(0), heads = m4.size(1);
    if ((batches != 1 && batches != B) || (heads != 1 && heads != h))
      fail<ShapeError>("{}: mask of shape {} does not broadcast to (B={}, h={}, N, M)", variant, to_string(mask.shape()),
                       B, h);
    auto stride = [&](int d) { return m4.size(d) == 1 ? 0 : m4.stride(d); };
    sb = stride(0), sh = stride(1), sn = stride(2), sm = stride(3);
    data = m4.data<bool>();
    keep = m4;
  }
  bool operator()(int64_t b, int64_t i, int64_t n, int64_t m) const {
    return !data || data[b * sb + i * sh + n * sn + m * sm];
  }
  Tensor keep;  // holds the storage `data` points into
};

// (B, h, L, d) -> (L, B, h*d), contiguous: rows are positions, for index_select along dim 0.
Tensor rows_major(const Tensor& t) {
  return reshape(contiguous(permute(t, {2, 0, 1, 3})), {t.size(2), t.size(0), t.size(1) * t.size(3)});
}
// (B, h, L, d) -> (h*L, B, d), contiguous: rows are (head, position) pairs, for per-head gathers.
Tensor head_rows_major(const Tensor& t) {
  return reshape(contiguous(permute(t, {1, 2, 0, 3})), {t.size(1) * t.size(2), t.size(0), t.size(3)});
}

// Which row of cat(block rows, global rows) holds each query position's output; checks the
// pattern's invariants, so a pattern bug is an error, never a silent wrong answer.
Tensor output_rows(const BlockPattern& p, const char* variant) {
  std::vector<int64_t> src(p.n, -1);
  const int64_t base = p.blocks * p.rows;
  for (size_t r = 0; r < p.global_rows.size(); ++r) {
    const int64_t n = p.global_rows[r];
    if (n < 0 || n >= p.n || src[n] >= 0) fail<ValueError>("{}: internal: bad global row {}", variant, n);
    src[n] = base + static_cast<int64_t>(r);
  }
  for (int64_t s = 0; s < base; ++s) {
    const int64_t n = p.query[s];
    if (n < 0) continue;
    if (n >= p.n) fail<ValueError>("{}: internal: query position {} >= N={}", variant, n, p.n);
    if (src[n] >= base) continue;  // a global row also in a block: its dense row wins
    if (src[n] >= 0) fail<ValueError>("{}: internal: query position {} is in two blocks", variant, n);
    src[n] = s;
  }
  for (int64_t n = 0; n < p.n; ++n)
    if (src[n] < 0) fail<ValueError>("{}: internal: query position {} is in no block", variant, n);
  for (int64_t m : p.key)
    if (m >= p.m) fail<ValueError>("{}: internal: key position {} >= M={}", variant, m, p.m);
  for (int64_t m : p.global_keys)
    if (m < 0 || m >= p.m) fail<ValueError>("{}: internal: global key {} outside [0, {})", variant, m, p.m);
  return from_vector(src);
}

// The element-level rule over the gathered scores: (Bm, hm, blocks, b, S + G) bool.
Tensor band_allowed(const BlockPattern& p, const MaskView& mv, bool causal) {
  const int64_t nblk = p.blocks, b = p.rows, S = p.slots, G = p.global_keys.size(), W = S + G;
  const int64_t hm = std::max(mv.heads, p.key_heads);
  Tensor allowed = Tensor::empty({mv.batches, hm, nblk, b, W}, kBool);
  bool* out = allowed.data<bool>();
  parallel_for(mv.batches * hm * nblk, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(b * W, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   const int64_t bb = r / (hm * nblk), hh = r / nblk % hm, blk = r % nblk;
                   const int64_t* keys = p.key.data() + ((p.key_heads > 1 ? hh : 0) * nblk + blk) * S;
                   bool* row = out + r * b * W;
                   for (int64_t i = 0; i < b; ++i, row += W) {
                     const int64_t n = p.query[blk * b + i];
                     for (int64_t j = 0; j < W; ++j) {
                       const int64_t m = j < S ? keys[j] : p.global_keys[j - S];
                       bool ok = n >= 0 && m >= 0 && (!causal || m <= n);
                       if (ok && j < S && p.max_distance >= 0) ok = std::abs(n - m) <= p.max_distance;
                       row[j] = ok && mv(bb, hh, n, m);
                     }
                   }
                 }
               });
  return allowed;
}

// The global rows' rule: (Bm, hm, R, M) bool, or undefined when every key is allowed.
Tensor rows_allowed(const BlockPattern& p, const MaskView& mv, bool causal) {
  if (!mv.data && !causal) return {};
  const int64_t R = p.global_rows.size(), M = p.m;
  Tensor allowed = Tensor::empty({mv.batches, mv.heads, R, M}, kBool);
  bool* out = allowed.data<bool>();
  for (int64_t bb = 0; bb < mv.batches; ++bb)
    for (int64_t hh = 0; hh < mv.heads; ++hh)
      for (int64_t r = 0; r < R; ++r) {
        const int64_t n = p.global_rows[r];
        bool* row = out + ((bb * mv.heads + hh) * R + r) * M;
        for (int64_t m = 0; m < M; ++m) row[m] = (!causal || m <= n) && mv(bb, hh, n, m);
      }
  return allowed;
}

// Scatters the gathered probabilities into a dense (B, h, N, M) tensor (need_weights only).
template <class T>
void densify(const BlockPattern& p, const Tensor& band_p, const Tensor& rows_p, const Tensor& att) {
  const int64_t B = att.size(0), h = att.size(1), N = p.n, M = p.m;
  const int64_t nblk = p.blocks, b = p.rows, S = p.slots, G = p.global_keys.size(), R = p.global_rows.size();
  T* A = att.data<T>();
  std::vector<char> is_row(N, 0);
  for (int64_t n : p.global_rows) is_row[n] = 1;
  if (band_p.defined()) {
    const T* P = band_p.data<T>();
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t blk = 0; blk < nblk; ++blk) {
          const int64_t* keys = p.key.data() + ((p.key_heads > 1 ? hh : 0) * nblk + blk) * S;
          for (int64_t i = 0; i < b; ++i) {
            const int64_t n = p.query[blk * b + i];
            if (n < 0 || is_row[n]) continue;
            const T* prow = P + (((bb * h + hh) * nblk + blk) * b + i) * (S + G);
            T* arow = A + ((bb * h + hh) * N + n) * M;
            for (int64_t j = 0; j < S; ++j)
              if (keys[j] >= 0) arow[keys[j]] += prow[j];
            for (int64_t j = 0; j < G; ++j) arow[p.global_keys[j]] += prow[S + j];
          }
        }
  }
  if (rows_p.defined()) {
    const T* P = rows_p.data<T>();
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t r = 0; r < R; ++r)
          std::copy_n(P + ((bb * h + hh) * R + r) * M, M, A + ((bb * h + hh) * N + p.global_rows[r]) * M);
  }
}

}  // namespace

BlockResult block_attention(const BlockPattern& p, const BlockInputs& in, const Tensor& mask, bool causal,
                            double dropout, bool training, Generator& gen, bool need_weights, const char* variant) {
  const int64_t B = in.q.size(0), h = in.q.size(1), dk = in.q.size(3), dv = in.v.size(3);
  const int64_t N = p.n, nblk = p.blocks, b = p.rows, S = p.slots;
  const int64_t G = p.global_keys.size(), R = p.global_rows.size();
  const MaskView mv(mask, B, h, variant);
  const Tensor row_src = output_rows(p, variant);  // (N)
  auto positions = [](std::vector<int64_t> v) {  // -1 (none) gathers row 0; the mask drops it
    for (int64_t& x : v) x = std::max<int64_t>(x, 0);
    return from_vector(v);
  };

  Tensor qr = rows_major(in.q);  // (N, B, h*dk)
  std::vector<Tensor> parts;     // output rows, (rows, B, h*dv) each
  Tensor band_p, rows_p;
  if (nblk > 0) {
    Tensor kr, vr;  // (M, B, h*dk), (M, B, h*dv) when some gather is shared by the heads
    if (p.key_heads == 1 || G > 0) kr = rows_major(in.k), vr = rows_major(in.v);
    Tensor qb = permute(reshape(index_select(qr, 0, positions(p.query)), {nblk, b, B, h, dk}),
                        {2, 3, 0, 1, 4});  // (B, h, nblk, b, dk)
    Tensor kb, vb;                         // (B, h, nblk, S, dk), (B, h, nblk, S, dv)
    if (p.key_heads == 1) {
      Tensor idx = positions(p.key);
      kb = permute(reshape(index_select(kr, 0, idx), {nblk, S, B, h, dk}), {2, 3, 0, 1, 4});
      vb = permute(reshape(index_select(vr, 0, idx), {nblk, S, B, h, dv}), {2, 3, 0, 1, 4});
    } else {
      std::vector<int64_t> flat(p.key.size());  // (h, nblk, S): row i*M + m of the (h*M, B, d) table
      for (size_t s = 0; s < flat.size(); ++s)
        flat[s] = static_cast<int64_t>(s) / (nblk * S) * p.m + std::max<int64_t>(p.key[s], 0);
      Tensor idx = from_vector(flat);
      kb = permute(reshape(index_select(head_rows_major(in.k), 0, idx), {h, nblk, S, B, dk}), {3, 0, 1, 2, 4});
      vb = permute(reshape(index_select(head_rows_major(in.v), 0, idx), {h, nblk, S, B, dv}), {3, 0, 1, 2, 4});
    }
    Tensor scores = matmul(qb, transpose(kb, -2, -1));  // (B, h, nblk, b, S)
    Tensor vg;                                          // (B, h, G, dv)
    if (G > 0) {
      Tensor gidx = from_vector(p.global_keys);
      Tensor kg = permute(reshape(index_select(kr, 0, gidx), {G, B, h, dk}), {1, 2, 0, 3});  // (B, h, G, dk)
      vg = permute(reshape(index_select(vr, 0, gidx), {G, B, h, dv}), {1, 2, 0, 3});
      Tensor sg = matmul(reshape(qb, {B, h, nblk * b, dk}), transpose(kg, -2, -1));  // (B, h, nblk*b, G)
      scores = cat({scores, reshape(sg, {B, h, nblk, b, G})}, -1);                   // (B, h, nblk, b, S+G)
    }
    band_p = softmax(scores, -1, band_allowed(p, mv, causal));  // (B, h, nblk, b, S+G)
    Tensor pd = attention_dropout(band_p, dropout, training, gen);
    Tensor ob = matmul(G > 0 ? narrow(pd, -1, 0, S) : pd, vb);  // (B, h, nblk, b, dv)
    if (G > 0)
      ob = ob + reshape(matmul(reshape(narrow(pd, -1, S, G), {B, h, nblk * b, G}), vg), {B, h, nblk, b, dv});
    parts.push_back(reshape(permute(ob, {2, 3, 0, 1, 4}), {nblk * b, B, h * dv}));
  }
  if (R > 0) {
    Tensor q_rows = in.q_rows.defined()
                        ? in.q_rows
                        : permute(reshape(index_select(qr, 0, from_vector(p.global_rows)), {R, B, h, dk}),
                                  {1, 2, 0, 3});  // (B, h, R, dk)
    const Tensor& k_rows = in.k_rows.defined() ? in.k_rows : in.k;  // (B, h, M, dk)
    const Tensor& v_rows = in.v_rows.defined() ? in.v_rows : in.v;  // (B, h, M, dv)
    rows_p = softmax(matmul(q_rows, transpose(k_rows, -2, -1)), -1, rows_allowed(p, mv, causal));  // (B, h, R, M)
    Tensor orow = matmul(attention_dropout(rows_p, dropout, training, gen), v_rows);           // (B, h, R, dv)
    parts.push_back(reshape(permute(orow, {2, 0, 1, 3}), {R, B, h * dv}));
  }

  BlockResult result;
  if (parts.empty()) {
    result.o = zeros({B, h, N, dv}, in.q.dtype());
  } else {
    Tensor rows = parts.size() == 1 ? parts[0] : cat(parts, 0);  // (nblk*b + R, B, h*dv)
    result.o = permute(reshape(index_select(rows, 0, row_src), {N, B, h, dv}), {1, 2, 0, 3});  // (B, h, N, dv)
  }
  if (need_weights) {
    NoGradGuard no_grad;
    result.attention = zeros({B, h, N, p.m}, in.q.dtype());
    Tensor bp = band_p.defined() ? kernels::contiguous(band_p) : Tensor();
    Tensor rp = rows_p.defined() ? kernels::contiguous(rows_p) : Tensor();
    if (in.q.dtype() == kFloat64)
      densify<double>(p, bp, rp, result.attention);
    else
      densify<float>(p, bp, rp, result.attention);
  }
  return result;
}

// ---- longformer ----

VariantSchema Longformer::schema() {
  using T = OptionType;
  VariantSchema s{"longformer", "dilated sliding window plus global positions (Beltagy et al. 2020, Longformer)",
                  multihead_options(),
                  "O(B h (N (2w + 1 + G) + G M) (dk + dv)) + projections O(B (N + M) D h (dk + dv)); G global positions, "
                  "w + 1 instead of 2w + 1 when causal; separate_global adds O(B M D h (dk + dv)); need_weights: the "
                  "gathered-block core, O(B h (N (b + 2w + G) + G M) (dk + dv)), b = max(w, 16), and O(B h N M)",
                  "O(B h (N + M) (dk + dv)): tile_attention parts merged by log-sum-exp, no N x w scores; need_weights: "
                  "O(B h (N (b + 2w + G) + G M)) gathered scores and probabilities, and the densified O(B h N M)"};
  s.options.push_back({"window", T::Int, "64", "one-sided window w: |n - m| <= w*d", {}});
  s.options.push_back({"dilation", T::Int, "1", "dilation d: also (n - m) mod d == 0", {}});
  s.options.push_back({"global", T::IntList, "", "global positions, e.g. global=0+17 (instead of global_first)", {}});
  s.options.push_back({"global_first", T::Int, "1", "the first g positions are global", {}});
  s.options.push_back({"separate_global", T::Bool, "false", "global rows use q_global, k_global, v_global", {}});
  s.capabilities = Capabilities::all();
  return s;
}

std::shared_ptr<Attention> Longformer::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  LongformerConfig lc;
  lc.window = o.get_int("window");
  if (lc.window < 0) o.reject("window", fmt::format("must be >= 0, got {}", lc.window));
  lc.dilation = o.get_int("dilation");
  if (lc.dilation < 1) o.reject("dilation", fmt::format("must be >= 1, got {}", lc.dilation));
  if (o.given("global") && o.given("global_first"))
    o.reject("global", "give either global=positions or global_first=g, not both");
  if (o.given("global")) {
    lc.global_list = true;
    lc.global = o.get_int_list("global");
    std::sort(lc.global.begin(), lc.global.end());
    for (size_t i = 0; i < lc.global.size(); ++i) {
      if (lc.global[i] < 0) o.reject("global", fmt::format("positions must be >= 0, got {}", lc.global[i]));
      if (i > 0 && lc.global[i] == lc.global[i - 1])
        o.reject("global", fmt::format("position {} is listed twice", lc.global[i]));
    }
  } else {
    lc.global_first = o.get_int("global_first");
    if (lc.global_first < 0) o.reject("global_first", fmt::format("must be >= 0, got {}", lc.global_first));
  }
  lc.separate_global = o.get_bool("separate_global");
  return std::make_shared<Longformer>(d_model, c, lc);
}

Longformer::Longformer(int64_t d_model, const HeadConfig& c, const LongformerConfig& lc)
    : ProjectedAttention("longformer", d_model, c), options(lc) {
  if (lc.separate_global) {
    const int64_t h = c.heads;
    q_global = register_module("q_global", std::make_shared<Linear>(d_model, h * c.key_size, c.bias));
    k_global = register_module("k_global", std::make_shared<Linear>(d_model, h * c.key_size, c.bias));
    v_global = register_module("v_global", std::make_shared<Linear>(d_model, h * c.value_size, c.bias));
  }
}

std::vector<int64_t> Longformer::global_rows(int64_t N) const {
  // Global positions >= N are ignored (docs/attention.md, "longformer"), also as keys when M > N.
  std::vector<int64_t> rows;
  if (options.global_list) {
    for (int64_t g : options.global)
      if (g < N) rows.push_back(g);
  } else {
    for (int64_t g = 0; g < std::min(options.global_first, N); ++g) rows.push_back(g);
  }
  return rows;
}

BlockPattern Longformer::pattern(int64_t N, int64_t M, bool causal) const {
  const int64_t w = options.window, d = options.dilation;
  BlockPattern p;
  p.n = N, p.m = M;
  // A global position g < N is a key only when g < M (cross-attention on raw indices).
  const std::vector<int64_t> global = global_rows(N);
  std::vector<char> global_key(M, 0);
  for (int64_t g : global) {
    p.global_rows.push_back(g);
    if (g < M) global_key[g] = 1, p.global_keys.push_back(g);
  }
  // Residue class r holds positions r, r + d, r + 2d, ...; within a class the dilated window is
  // a plain band |i - j| <= w of class indices. Each class is cut into blocks of b rows; block t
  // gathers the span of class indices [t*b - w, t*b + b - 1 + w] (no right half when causal),
  // shifted inwards at the edges so that it never leaves [0, Lk).
  const int64_t classes = std::min(d, N);
  const int64_t Lq = (N + d - 1) / d, Lk = (M + d - 1) / d;
  const int64_t b = std::max<int64_t>(1, std::min(std::max<int64_t>(w, 16), Lq));
  const int64_t per_class = (Lq + b - 1) / b;
  const int64_t left = w, right = causal ? 0 : w;
  const int64_t S = std::min(b + left + right, Lk);
  p.rows = b, p.slots = S, p.blocks = classes * per_class, p.max_distance = w * d;
  p.query.assign(p.blocks * b, -1);
  p.key.assign(p.blocks * S, -1);
  for (int64_t r = 0; r < classes; ++r)
    for (int64_t t = 0; t < per_class; ++t) {
      const int64_t blk = r * per_class + t;
      const int64_t start = std::clamp<int64_t>(t * b - left, 0, Lk - S);
      for (int64_t i = 0; i < b; ++i) {
        const int64_t n = r + (t * b + i) * d;
        if (n < N) p.query[blk * b + i] = n;
      }
      for (int64_t j = 0; j < S; ++j) {
        const int64_t m = r + (start + j) * d;
        if (m < M && !global_key[m]) p.key[blk * S + j] = m;  // global keys come once, as global keys
      }
    }
  return p;
}

std::vector<PatternPart> Longformer::parts(int64_t N, int64_t M, bool causal) const {
  const std::vector<int64_t> rows = global_rows(N);
  std::vector<int64_t> keys;  // (G) sorted
  std::vector<char> is_row(N, 0);
  for (int64_t g : rows) {
    is_row[g] = 1;
    if (g < M) keys.push_back(g);
  }
  std::vector<PatternPart> out;
  // The window, without the global keys (the next part holds them, so each key counts once)
  // and without the global rows (the last part replaces them).
  out.push_back(dilated_band(N, M, options.window, options.dilation, causal, keys, is_row));
  if (!keys.empty()) {  // every non-global row sees the global keys (causal: those <= n)
    PatternPart part;
    part.k_rows = keys;
    part.tile = 64;  // the kernel clips a key tile to the G columns
    part.pattern.lo.assign(N, 0);
    part.pattern.hi.resize(N);
    for (int64_t n = 0; n < N; ++n)
      part.pattern.hi[n] = is_row[n] ? 0
                           : causal  ? std::upper_bound(keys.begin(), keys.end(), n) - keys.begin()
                                     : int64_t(keys.size());
    out.push_back(std::move(part));
  }
  if (!rows.empty()) {  // the global rows against every key (causal: m <= n)
    PatternPart part;
    part.q_rows = rows;
    part.alone = true;  // the other parts give the global rows nothing
    part.pattern.lo.assign(rows.size(), 0);
    for (int64_t g : rows) part.pattern.hi.push_back(causal ? std::min(g + 1, M) : M);
    out.push_back(std::move(part));
  }
  return out;
}

AttentionResult Longformer::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                    bool need_weights) {
  return forward_with(x, context, mask, causal, need_weights, {});
}

AttentionResult Longformer::forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask,
                                             bool causal, bool need_weights) {
  if (need_weights) return Attention::forward_segments(x, segment_ids, mask, causal, true);  // the composed twin
  return forward_with(x, {}, mask, causal, false, segment_ids);
}

AttentionResult Longformer::forward_with(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                         bool need_weights, const Tensor& segment_ids) {
  const bool is_causal = causal || config.causal;
  const Tensor& c = check_inputs("longformer", d_model_, x, context, is_causal);
  const int64_t h = config.heads, N = x.size(1), M = c.size(1);
  check_mask(mask, N, M, "longformer");
  Heads hd = project(x, c);  // q (B, h, N, dk), k (B, h, M, dk), v (B, h, M, dv)
  const std::vector<int64_t> rows = global_rows(N);
  Tensor q_rows, k_rows, v_rows;  // separate_global: the global rows' own projections
  if (q_global && !rows.empty()) {
    Tensor xg = index_select(x, 1, from_vector(rows));  // (B, R, D)
    q_rows = split_heads((*q_global)(xg), h);           // (B, h, R, dk), not scaled
    k_rows = split_heads((*k_global)(c), h);            // (B, h, M, dk)
    v_rows = split_heads((*v_global)(c), h);            // (B, h, M, dv)
  }

  if (!need_weights) {  // the fused path
    std::vector<PatternPart> ps = parts(N, M, is_causal);
    if (q_rows.defined()) {
      PatternPart& last = ps.back();  // the global rows
      last.q = q_rows, last.k = k_rows, last.v = v_rows;
    }
    TileOptions opt;
    if (is_training() && config.attn_dropout > 0) {
      opt.dropout = config.attn_dropout;
      opt.seed = gen.next_u64();
    }
    return {finish(attend_parts(ps, hd.q, hd.k, hd.v, mask, opt, "longformer", segment_ids)), {}};
  }

  // The composed twin: the gathered-block core, which also densifies the probabilities.
  const BlockPattern p = pattern(N, M, is_causal);
  const double scale = 1.0 / std::sqrt(double(config.key_size));
  BlockInputs in{hd.q * scale, hd.k, hd.v, {}, {}, {}};  // (B, h, N, dk), (B, h, M, dk), (B, h, M, dv)
  if (q_rows.defined()) in.q_rows = q_rows * scale, in.k_rows = k_rows, in.v_rows = v_rows;
  BlockResult r = block_attention(p, in, mask, is_causal, config.attn_dropout, is_training(), gen, need_weights,
                                  "longformer");
  return {finish(r.o), r.attention};
}

void Longformer::own_options(OptionValues& v) const {
  v.set("window", options.window).set("dilation", options.dilation);
  if (options.global_list)
    v.set("global", options.global);
  else
    v.set("global_first", options.global_first);
  v.set("separate_global", options.separate_global);
}

Tensor Longformer::prune_tensor(const std::string& name, const Tensor& from, const Tensor& to,
                                const std::vector<int64_t>& keep) const {
  auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  if (starts("q_global.") || starts("k_global.")) return take_heads(from, keep, config.key_size, 0);
  if (starts("v_global.")) return take_heads(from, keep, config.value_size, 0);
  return ProjectedAttention::prune_tensor(name, from, to, keep);
}

}  // namespace attnlab::nn
