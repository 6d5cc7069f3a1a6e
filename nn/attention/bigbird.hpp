/// @file
/// `bigbird` (Zaheer et al. 2020, "Big Bird: Transformers for Longer Sequences";
/// docs/attention.md, "bigbird"): block-sparse attention over blocks of b positions.
///
///   query block j attends key blocks  j - (W-1)/2 .. j + (W-1)/2   (window, clipped at the edges)
///                                     0 .. g-1                     (global)
///                                     random_blocks[i, j, :]       (random, per head i)
///   the first g query blocks attend every key block; softmax over the union, each key once.
///
/// N (and M for cross-attention) must be multiples of b; not causal. The buffer random_blocks
/// (h, max_len/b, r) is drawn once at construction from the layer's seeded generator, among the
/// blocks outside query block j's window and the global blocks. Computed by the gathered-block
/// core of longformer.hpp.
/// @ingroup attention
#pragma once
#include "nn/attention/longformer.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The options of `bigbird` beside the head options (see the file's description).
struct BigBirdConfig {
  int64_t block = 16;     ///< b
  int64_t window = 3;     ///< W, odd: window blocks per query block
  int64_t global = 2;     ///< g: global blocks
  int64_t random = 3;     ///< r: random blocks per query block and head
  int64_t max_len = 4096; ///< longest N (a multiple of b); random_blocks has max_len/b rows
};

/// The `bigbird` variant: block-sparse attention with window, global and random blocks (see the file's description).
class BigBird : public ProjectedAttention {
 public:
  BigBird(int64_t d_model, const HeadConfig& heads, const BigBirdConfig& config);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  void own_options(OptionValues& values) const override;
  std::string type_name() const override { return "BigBird"; }

  /// The gathered-block form of the pattern for N queries and M keys (public for tests).
  BlockPattern pattern(int64_t n, int64_t m) const;

  BigBirdConfig options;  ///< the options the layer was built from
  Tensor random_blocks;  ///< (h, max_len/b, r) int64 buffer; entries outside [0, M/b) are ignored

 protected:
  Tensor prune_tensor(const std::string& name, const Tensor& from, const Tensor& to,
                      const std::vector<int64_t>& keep) const override;
};

}  // namespace attnlab::nn
/// @}
