// attention_state_per_token and attention_density (costs.hpp).
#include "nn/attention/costs.hpp"

#include <set>
#include <string>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "nn/attention/bigbird.hpp"
#include "nn/attention/linformer.hpp"
#include "nn/attention/longformer.hpp"
#include "nn/attention/lsh.hpp"
#include "nn/attention/nystrom.hpp"
#include "nn/attention/patterns.hpp"
#include "nn/attention/sinkhorn.hpp"
#include "tensor/creation.hpp"

namespace attnlab::nn {
namespace {

// Puts a layer in eval mode without gradients for a scope, then restores its mode.
class EvalScope {
 public:
  explicit EvalScope(Attention& a) : attention_(a), was_training_(a.is_training()) { a.eval(); }
  ~EvalScope() { attention_.train(was_training_); }

 private:
  NoGradGuard no_grad_;
  Attention& attention_;
  bool was_training_;
};

void check_length(const char* who, int64_t n) {
  if (n < 1) fail<ValueError>("{}: the sequence length must be >= 1, got {}", who, n);
}

}  // namespace

double attention_state_per_token(Attention& a, int64_t n) {
  check_length("attention_state_per_token", n);
  auto per_head = [](const ProjectedAttention& p) { return double(p.config.heads * (p.config.key_size + p.config.value_size)); };
  if (dynamic_cast<LshAttention*>(&a) || dynamic_cast<SinkhornAttention*>(&a) || dynamic_cast<BigBird*>(&a) ||
      dynamic_cast<Longformer*>(&a))
    return per_head(static_cast<ProjectedAttention&>(a));
  if (auto* l = dynamic_cast<Linformer*>(&a)) return per_head(*l) * double(l->settings.proj_len) / double(n);
  if (auto* s = dynamic_cast<NystromAttention*>(&a)) return per_head(*s) * double(s->settings.landmarks) / double(n);
  EvalScope scope(a);
  std::unique_ptr<AttentionCache> cache = a.make_cache(1, n);
  a.forward_step(zeros({1, n, a.d_model()}), *cache);  // the state after N positions
  return double(cache->numel()) / double(n);
}

double attention_density(Attention& a, int64_t n, bool causal) {
  check_length("attention_density", n);
  const double pairs = double(n) * double(n);
  if (auto* p = dynamic_cast<PatternAttention*>(&a)) {
    int64_t allowed = 0;
    for (int64_t q = 0; q < n; ++q)
      for (int64_t k = 0; k <= (causal ? q : n - 1); ++k) allowed += p->allows(q, k);
    return double(allowed) / pairs;
  }
  if (auto* s = dynamic_cast<SinkhornAttention*>(&a)) return std::min(1.0, 2.0 * double(s->settings.block) / double(n));
  EvalScope scope(a);
  Generator gen(0);
  AttentionResult r = a.forward(randn({1, n, a.d_model()}, gen), {}, {}, causal, /*need_weights=*/true);
  if (!r.attention.defined() || r.attention.numel() == 0)
    return causal ? double(n) * double(n + 1) / 2 / pairs : 1.0;
  const double nonzero = double(sum(ne(r.attention, 0.0)).item<int64_t>());  // over (1, h, N, N)
  return nonzero / (double(r.attention.size(1)) * pairs);
}

bool attention_restricts_pairs(const Attention& a) {
  static const std::set<std::string> restricting = {"local",    "dilated", "sparse_strided", "sparse_fixed", "longformer",
                                                    "bigbird",  "lsh",     "routing",        "sinkhorn"};
  const std::string spec = a.spec();
  return restricting.count(spec.substr(0, spec.find('('))) > 0;
}

}  // namespace attnlab::nn
