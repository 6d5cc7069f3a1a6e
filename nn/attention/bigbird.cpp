// `bigbird`: the block pattern, the random_blocks draw and the option checks; the attention
// itself is longformer.hpp's gathered-block core (window and random key blocks gathered per
// query block and head, the global blocks as global keys, the global query blocks dense).
#include "nn/attention/bigbird.hpp"

#include <algorithm>
#include <cmath>

#include "autograd/ops.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {

VariantSchema BigBird::schema() {
  using T = OptionType;
  VariantSchema s{"bigbird", "block-sparse window + global + random blocks (Zaheer et al. 2020, Big Bird)",
                  multihead_options(),
                  "O(B h (N b (window + global + random) + global b M) (dk + dv)) + projections "
                  "O(B (N + M) D h (dk + dv))",
                  "O(B h (N b (window + global + random) + global b M)) for the gathered scores and probabilities, "
                  "O(B h N (window + random) (dk + dv)) for the gathered keys and values"};
  for (OptionSchema& o : s.options)
    if (o.name == "causal") o.doc = "not supported: true is an error";
  s.options.push_back({"block", T::Int, "16", "block size b (N must be a multiple)", {}});
  s.options.push_back({"window", T::Int, "3", "window blocks per query block (odd)", {}});
  s.options.push_back({"global", T::Int, "2", "the first g blocks are global", {}});
  s.options.push_back({"random", T::Int, "3", "random key blocks per query block and head", {}});
  s.options.push_back({"max_len", T::Int, "4096", "longest sequence (a multiple of block); sizes random_blocks", {}});
  s.capabilities = Capabilities::all();
  s.capabilities.causal = s.capabilities.decoding = Support::no;  // random blocks reach the future
  return s;
}

std::shared_ptr<Attention> BigBird::make(const Options& o, int64_t d_model) {
  HeadConfig c = read_head_config(o, d_model, o.get_int("heads"));
  if (c.causal) o.reject("causal", "bigbird is not causal (its random and global blocks look ahead); use longformer");
  BigBirdConfig bc;
  bc.block = o.get_int("block");
  if (bc.block < 1) o.reject("block", fmt::format("must be >= 1, got {}", bc.block));
  bc.window = o.get_int("window");
  if (bc.window < 1 || bc.window % 2 == 0)
    o.reject("window", fmt::format("must be odd and >= 1 (blocks j-(W-1)/2 .. j+(W-1)/2), got {}", bc.window));
  bc.global = o.get_int("global");
  if (bc.global < 0) o.reject("global", fmt::format("must be >= 0, got {}", bc.global));
  bc.random = o.get_int("random");
  if (bc.random < 0) o.reject("random", fmt::format("must be >= 0, got {}", bc.random));
  bc.max_len = o.get_int("max_len");
  if (bc.max_len < bc.block || bc.max_len % bc.block != 0)
    o.reject("max_len", fmt::format("must be a positive multiple of block={}, got {}", bc.block, bc.max_len));
  return std::make_shared<BigBird>(d_model, c, bc);
}

BigBird::BigBird(int64_t d_model, const HeadConfig& c, const BigBirdConfig& bc)
    : ProjectedAttention("bigbird", d_model, c), options(bc) {
  const int64_t h = c.heads, nb = bc.max_len / bc.block, r = bc.random, half = (bc.window - 1) / 2;
  const int64_t g = std::min(bc.global, nb);
  // Candidates of query block j: every block but its window and the global blocks.
  auto excluded = [&](int64_t j, int64_t kb) { return kb < g || std::abs(kb - j) <= half; };
  for (int64_t j = g; j < nb; ++j) {
    const int64_t blocked = g + std::min(j + half, nb - 1) - std::max(j - half, g) + 1;
    const int64_t candidates = nb - blocked;
    if (candidates < r)
      fail<ValueError>("bigbird: query block {} has only {} candidate blocks for random={} (max_len/block={} blocks, "
                       "window={}, global={}); lower random or raise max_len",
                       j, candidates, r, nb, bc.window, bc.global);
  }
  // Rows of the global query blocks are never read; they hold zeros, like the reference code's.
  std::vector<int64_t> table(h * nb * r, 0);
  std::vector<int64_t> pool;
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = g; j < nb; ++j) {
      pool.clear();
      for (int64_t kb = 0; kb < nb; ++kb)
        if (!excluded(j, kb)) pool.push_back(kb);
      // r draws without replacement (a partial Fisher-Yates shuffle)
      for (int64_t t = 0; t < r; ++t) {
        const int64_t pick = t + static_cast<int64_t>(gen.next_u64() % uint64_t(pool.size() - t));
        std::swap(pool[t], pool[pick]);
        table[(i * nb + j) * r + t] = pool[t];
      }
    }
  random_blocks = register_buffer("random_blocks", from_vector(table, {h, nb, r}));
}

BlockPattern BigBird::pattern(int64_t N, int64_t M) const {
  const int64_t b = options.block, W = options.window, half = (W - 1) / 2, g = options.global, r = options.random;
  const int64_t h = config.heads, nbq = N / b, nbk = M / b, gq = std::min(g, nbq), gk = std::min(g, nbk);
  const int64_t nb_max = random_blocks.size(1);
  BlockPattern p;
  p.n = N, p.m = M, p.rows = b, p.slots = (W + r) * b, p.blocks = nbq - gq, p.key_heads = r > 0 ? h : 1;
  for (int64_t n = 0; n < gq * b; ++n) p.global_rows.push_back(n);
  for (int64_t m = 0; m < gk * b; ++m) p.global_keys.push_back(m);
  p.query.resize(p.blocks * b);
  for (int64_t s = 0; s < p.blocks * b; ++s) p.query[s] = gq * b + s;
  p.key.assign(p.key_heads * p.blocks * p.slots, -1);
  const Tensor table = kernels::contiguous(random_blocks);  // (h, nb_max, r)
  const int64_t* rb = table.data<int64_t>();
  // A key block enters a list once, and not at all when it is global or outside [0, M/b): a
  // clipped window, a random block that repeats a window block, or an entry >= M/b.
  std::vector<int64_t> stamp(nbk, -1);
  for (int64_t i = 0; i < p.key_heads; ++i)
    for (int64_t blk = 0; blk < p.blocks; ++blk) {
      const int64_t j = gq + blk, list = i * p.blocks + blk;
      int64_t* slots = p.key.data() + list * p.slots;
      for (int64_t t = 0; t < W + r; ++t) {
        const int64_t kb = t < W ? j - half + t : rb[(i * nb_max + j) * r + (t - W)];
        if (kb < g || kb >= nbk || stamp[kb] == list) continue;
        stamp[kb] = list;
        for (int64_t s = 0; s < b; ++s) slots[t * b + s] = kb * b + s;
      }
    }
  return p;
}

AttentionResult BigBird::forward(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal,
                                 bool need_weights) {
  if (causal) fail<ValueError>("bigbird: causal attention is not supported (the random and global blocks look ahead)");
  const Tensor& c = check_inputs("bigbird", d_model_, x, context, false);
  const int64_t b = options.block, N = x.size(1), M = c.size(1);
  for (auto [what, len] : {std::pair<const char*, int64_t>{"N", N}, {"M", M}}) {
    if (len % b != 0)
      fail<ValueError>("bigbird: sequence length {}={} is not a multiple of block={}; pad it to {} and mask the padding",
                       what, len, b, (len / b + 1) * b);
    if (len > options.max_len)
      fail<ValueError>("bigbird: sequence length {}={} exceeds max_len={} (random_blocks has max_len/block rows)", what,
                       len, options.max_len);
  }
  check_mask(mask, N, M, "bigbird");
  const BlockPattern p = pattern(N, M);
  Heads hd = project(x, c);
  BlockInputs in{hd.q * (1.0 / std::sqrt(double(config.key_size))), hd.k, hd.v, {}, {}, {}};
  BlockResult r =
      block_attention(p, in, mask, false, config.attn_dropout, is_training(), gen, need_weights, "bigbird");
  return {finish(r.o), r.attention};
}

void BigBird::own_options(OptionValues& v) const {
  v.set("block", options.block).set("window", options.window).set("global", options.global);
  v.set("random", options.random).set("max_len", options.max_len);
}

Tensor BigBird::prune_tensor(const std::string& name, const Tensor& from, const Tensor& to,
                             const std::vector<int64_t>& keep) const {
  // Always by head: the base's "same shape = shared" rule would not reorder a permuting keep.
  if (name == "random_blocks") return take_heads(from, keep, 1, 0);
  return ProjectedAttention::prune_tensor(name, from, to, keep);
}

}  // namespace attnlab::nn
