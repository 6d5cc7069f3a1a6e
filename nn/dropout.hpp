/// @file
/// nn::Dropout (Srivastava et al. 2014), inverted: in training each element is zeroed with
/// probability p and the survivors are scaled by 1 / (1 - p), so evaluation is the identity.
/// The layer owns its Generator, seeded at construction from the default generator (so
/// manual_seed() before building a model fixes every mask) and reseedable with set_seed().
/// @ingroup nn
#pragma once
#include "nn/module.hpp"
#include "tensor/random.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

/// Inverted dropout (nn.Dropout): in train mode each element is zeroed with probability p and the rest scaled by 1 / (1 - p), drawn from the module's own generator.
class Dropout : public UnaryModule {
 public:
  /// p in [0, 1); ValueError otherwise.
  explicit Dropout(double p = 0.5);
  /// x (...) -> (...); x itself in eval mode or when p = 0.
  Tensor forward(const Tensor& x) override;
  void set_seed(uint64_t seed) { gen_.set_state(seed, 0); }  ///< restarts the module's generator at `seed`
  Generator& generator() { return gen_; }  ///< the module's generator (registered, so checkpoints keep it)
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;

  double p;  ///< the probability of zeroing an element

 private:
  Generator gen_;
};

/// A seed for a module's own generator, drawn from `from` (advancing it), so that modules built
/// after manual_seed(s) get distinct but reproducible streams.
uint64_t draw_seed(Generator& from = default_generator());

}  // namespace attnlab::nn
/// @}
