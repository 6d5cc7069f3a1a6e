/// @file
/// The one interface every attention variant implements (docs/attention.md), and the
/// pieces the multi-head variants share: splitting and merging heads, building the allowed
/// mask, scaled dot-product attention, and the per-head gate/mask multiply before out_proj.
/// @ingroup attention
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention/gate.hpp"
#include "nn/attention/spec.hpp"
#include "nn/module.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

class Attention;

/// The state one attention layer keeps between incremental decoding steps (forward_step).
/// Variants with a KV cache or a recurrent state derive from it; the default keeps the inputs.
struct AttentionCache {
  virtual ~AttentionCache() = default;
  /// Elements held in the cache's tensors: its memory, in numbers of the layer's dtype.
  virtual int64_t numel() const { return 0; }
  int64_t length = 0;                ///< positions consumed so far
  const Attention* owner = nullptr;  ///< the layer whose make_cache made it
};

/// Keys and values preallocated for max_len positions, rows [0, length) filled (mha,
/// talking_heads with hk key heads and hv value heads, synthesizer with k undefined unless it has
/// a vanilla part).
struct KVCache : AttentionCache {
  Tensor k;  ///< (B, hk, max_len, dk) or undefined
  Tensor v;  ///< (B, hv, max_len, dv)
  int64_t numel() const override;
};
/// A zeroed KVCache made by `owner`; hk = 0 leaves k undefined.
std::unique_ptr<KVCache> make_kv_cache(const Attention* owner, int64_t batch, int64_t max_len, int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                                       DType dtype);

/// What Attention::forward returns: the output and, when asked for, the attention probabilities.
struct AttentionResult {
  Tensor output;     ///< (B, N, D)
  Tensor attention;  ///< (B, h, N, M) probabilities, when requested and the variant has them
};

/// The interface of every attention variant (docs/attention.md): forward, packed sequences, head pruning, incremental decoding.
class Attention : public Module {
 public:
  /// x (B, N, D); context (B, M, D) for cross-attention or undefined; mask bool, broadcastable to
  /// (B, h, N, M), true = may attend; causal adds m <= n (self-attention only).
  virtual AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {},
                                  bool causal = false, bool need_weights = false) = 0;
  Tensor operator()(const Tensor& x, const Tensor& mask = {}, bool causal = false) {  ///< Self-attention of x (B, N, D): forward(x, {}, mask, causal).output.
    return forward(x, {}, mask, causal).output;
  }
  /// Packed sequences (docs/attention.md, "Packed sequences"): self-attention over x (B, N, D) in
  /// which query n attends key m only when segment_ids[b, n] == segment_ids[b, m] (int64 (B, N)),
  /// besides `mask` and causal. Checks the ids (ShapeError / DTypeError naming segment_ids), then
  /// runs forward_segments. Undefined ids: plain forward.
  AttentionResult forward_packed(const Tensor& x, const Tensor& segment_ids, const Tensor& mask = {},
                                 bool causal = false, bool need_weights = false);
  /// The expected L0 norm of the head gates (a 0-d tensor; zero without gates).
  virtual Tensor l0_penalty() const;
  /// A smaller layer with only the heads in `keep` (value heads), equal in output to this layer
  /// with the other heads masked out.
  virtual std::shared_ptr<Attention> prune_heads(const std::vector<int64_t>& keep) const = 0;
  /// Incremental causal decoding. make_cache starts an empty state for `batch` sequences of at
  /// most `max_len` positions; forward_step takes the next T positions x_new (B, T, D) and returns
  /// their outputs (B, T, D), equal to the last T rows of a causal forward over every position so
  /// far. The default recomputes that causal forward over the kept inputs (the whole forward per
  /// step); mha, talking_heads, collaborative and synthesizer override it with key/value caches,
  /// local with a rolling window, linear and performer with the recurrent state
  /// (docs/attention.md, "Incremental decoding"). Runs without recording gradients.
  virtual std::unique_ptr<AttentionCache> make_cache(int64_t batch, int64_t max_len) const;
  virtual Tensor forward_step(const Tensor& x_new, AttentionCache& cache);  ///< the outputs (B, T, D) of the next positions x_new (B, T, D); ValueError for a cache another layer made or in train mode (see make_cache)
  /// The spec this layer was built from, with every size pinned (what prune_heads preserves).
  virtual std::string spec() const = 0;
  int64_t d_model() const { return d_model_; }  ///< D, the model width the layer was built for
  /// The variant's registry name: spec() up to its '('.
  std::string variant_name() const;

 protected:
  /// forward_packed's hook, with checked ids (B, N). The default runs forward with segment_mask
  /// (B, 1, N, N) and-ed with `mask`; the variants on the fused tile kernel pass the ids to it
  /// instead (no (N, N) mask); those that take no mask or key masks only reject the ids.
  virtual AttentionResult forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask, bool causal,
                                           bool need_weights);
  /// For forward_step overrides: `cache` as the type C that this layer's make_cache made, after
  /// checking that this layer made it and is in eval mode (ValueError naming `who` otherwise).
  template <class C>
  C& step_cache(AttentionCache& cache, const std::string& who) const {
    auto* c = dynamic_cast<C*>(&cache);
    if (!c || cache.owner != this) fail<ValueError>("{}: forward_step got a cache made by another layer", who);
    if (is_training()) fail<ValueError>("{}: forward_step is for inference; call eval() first", who);
    return *c;
  }
  int64_t d_model_ = 0;  ///< D
};

// ---- shared by the multi-head variants ----

/// Head sizes and flags that every multi-head variant reads from its options.
struct HeadConfig {
  int64_t heads = 8;  ///< h
  int64_t key_size = 0;    ///< dk
  int64_t value_size = 0;  ///< dv
  bool bias = true;  ///< biases in the projections
  bool causal = false;  ///< causal masking built into the layer (spec option `causal`)
  double attn_dropout = 0;  ///< dropout rate on the attention probabilities (train mode)
  GateConfig gate;  ///< head gates (nn/attention/gate.hpp)
};
/// Options every multi-head variant accepts (heads, key_size, value_size, bias, causal,
/// attn_dropout and the gate options).
std::vector<OptionSchema> multihead_options();
/// Resolves sizes that default to D/h; an h that does not divide D is an error asking for the
/// size explicitly. A schema without `bias` (mla) reads as bias = false, one without `key_size`
/// (collaborative) as key_size = 0.
HeadConfig read_head_config(const Options& o, int64_t d_model, int64_t heads_for_defaults);
/// The options of read_head_config that `schema` declares, as `c` holds them (for format_spec);
/// key_size only when used (> 0), the gate options only with a gate.
void set_head_options(OptionValues& values, const HeadConfig& c, const VariantSchema& schema);

/// Checks x (B, N, D) and the optional context (B, M, D); returns the keys' source.
const Tensor& check_inputs(const char* variant, int64_t d_model, const Tensor& x, const Tensor& context,
                           bool causal, bool allows_context = true);
/// (B, N, h*d) -> (B, h, N, d)
Tensor split_heads(const Tensor& t, int64_t heads);
/// (B, h, N, d) -> (B, N, h*d)
Tensor merge_heads(const Tensor& t);
/// The allowed mask for (N, M) scores: `mask` (broadcastable to (B, h, N, M)) and, when causal,
/// m <= n. Undefined when everything is allowed.
Tensor allowed_mask(const Tensor& mask, int64_t n, int64_t m, bool causal, const char* variant);
/// Entries [i*d, (i+1)*d) of `w` along `dim` for every kept head i (prune_heads).
Tensor take_heads(const Tensor& w, const std::vector<int64_t>& keep, int64_t d, int64_t dim);
/// Checks that `mask` is a bool tensor broadcastable to (B, h, N, M) (undefined passes).
void check_mask(const Tensor& mask, int64_t n, int64_t m, const char* variant);
/// For the variants that summarise keys (linformer, compressed, nystrom, sinkhorn) and those
/// whose fast path needs one: a key mask, constant along N, as a (B|1, h|1, 1, M) view; an
/// undefined mask stays undefined; a mask that varies along N is an error naming the variant.
Tensor key_mask(const Tensor& mask, int64_t n, int64_t m, const char* variant);
/// true when `mask` is undefined or constant along N (a key mask).
bool is_key_mask(const Tensor& mask);
/// Validates `keep` for prune_heads: non-empty, in range, no repeats.
std::vector<int64_t> check_keep(const std::vector<int64_t>& keep, int64_t heads, const char* variant);
/// One slicing rule of prune_heads: the tensors whose name starts with `prefix` ("q_proj." for
/// the weight and the bias, "out_proj.weight") take the blocks [i*size, (i+1)*size) along `dim`
/// of the heads i in `heads` (empty: the kept heads; mha's k/v take the kept kv heads).
struct HeadSlice {
  std::string prefix;  ///< the tensors' name prefix
  int64_t size;  ///< the block size of one head
  int64_t dim = 0;  ///< the dim the blocks run along
  std::vector<int64_t> heads = {};  ///< the heads whose blocks are kept; empty = the kept heads
};
/// The value prune_heads gives a tensor of the smaller layer that no HeadSlice matches: `from`
/// is this layer's tensor of that name (undefined when only the smaller layer has one), `to` the
/// smaller layer's.
using PruneRest = std::function<Tensor(const std::string& name, const Tensor& from, const Tensor& to)>;
/// prune_heads' copy from `from` into the smaller layer `to` (built with keep.size() heads): `to`
/// takes `from`'s dtype, then every tensor of `to`, by name, the first matching slice of `from`'s
/// tensor; head_mask and gate.log_alpha the kept entries; any other tensor `rest` (default:
/// `from`'s tensor whole, an error when `from` has none); then `from`'s train mode. A shape that
/// does not come out right is a ShapeError naming the variant and the tensor.
void copy_pruned_state(const Attention& from, Attention& to, const std::vector<int64_t>& keep,
                       const std::vector<HeadSlice>& slices, const std::string& variant, const PruneRest& rest = {});
// ---- shared by the forward_step overrides ----

/// x_new must be (batch, T, d_model), T >= 1, with length + T <= max_len (max_len < 0: no limit).
void check_step(const std::string& who, int64_t d_model, const Tensor& x_new, int64_t batch, int64_t length,
                int64_t max_len);
/// Copies `rows` into `buffer` at [at, at + rows.size(dim)) along `dim` (a cache append).
void write_rows(const Tensor& buffer, int64_t dim, int64_t at, const Tensor& rows);
/// The causal mask of T new queries at positions length, ..., length + T - 1 over the
/// length + T keys so far, (T, length + T); undefined when T == 1 (the new query sees every key).
Tensor step_causal_mask(int64_t t, int64_t length);

// ---- packed sequences ----

/// segment_ids must be int64 (batch, n); a ShapeError or DTypeError from `who` naming the tensor, the
/// shape and dtype seen and those expected.
void check_segment_ids(const Tensor& segment_ids, int64_t batch, int64_t n, const std::string& who);
/// ids (B, N) -> bool (B, 1, N, N): ids[b, n] == ids[b, m], and-ed with `mask` (broadcastable to
/// (B, h, N, N)) when given.
Tensor segment_mask(const Tensor& segment_ids, const Tensor& mask = {});
/// The ValueError of a variant that cannot take segment ids, with the reason.
[[noreturn]] void reject_segment_ids(const std::string& variant, const char* why);

/// Inverted dropout on attention probabilities (train mode only).
Tensor attention_dropout(const Tensor& p, double rate, bool training, Generator& gen);

}  // namespace attnlab::nn
/// @}
