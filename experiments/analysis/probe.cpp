// Probes for the two model kinds, attention capture and gate values (see probe.hpp).
#include "experiments/analysis/probe.hpp"

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "nn/loss.hpp"
#include "tensor/creation.hpp"

namespace attnlab::analysis {
namespace {

std::vector<nn::TransformerBlock*> blocks_of(nn::ModuleList& list) {
  std::vector<nn::TransformerBlock*> out;
  for (const nn::ModulePtr& m : list) out.push_back(static_cast<nn::TransformerBlock*>(m.get()));
  return out;
}

// The top logit along the last dim, summed: gather at the argmax (taken without history).
Tensor sum_of_top(const Tensor& logits) {
  Tensor index;
  {
    NoGradGuard no_grad;
    index = argmax(logits, -1, /*keepdim=*/true);  // (..., 1)
  }
  return sum(gather(logits, -1, index));  // ()
}

}  // namespace

Probe classifier_probe(nn::EncoderClassifier& model, int64_t pad_id) {
  Probe p;
  p.model = &model;
  p.blocks = blocks_of(*model.blocks);
  p.pad_id = pad_id;
  const bool cls = model.cls_token.defined();
  const bool tokens = model.tok_emb != nullptr;
  p.forward = [&model, pad_id, tokens](const data::Batch& b) {
    Tensor padding = tokens && pad_id >= 0 ? ne(b.inputs, double(pad_id)) : Tensor();  // (B, N) bool
    return model.forward(b.inputs, padding);                                            // (B, C)
  };
  p.loss = [](const Tensor& logits, const data::Batch& b) { return nn::cross_entropy(logits, b.targets); };
  p.explained = sum_of_top;
  if (tokens)
    p.axis_tokens = [cls](const data::Batch& b) {
      if (!cls) return b.inputs;
      return cat({full({b.inputs.size(0), 1}, -1.0, kInt64), b.inputs}, 1);  // (B, 1 + N)
    };
  if (tokens) p.input_tensors.push_back(model.tok_emb->weight);
  else p.input_tensors.push_back(model.input_proj->weight);
  if (cls) p.input_tensors.push_back(model.cls_token);
  p.input_tensors.push_back(model.pos_emb->weight);
  return p;
}

Probe lm_probe(nn::CausalLM& model) {
  Probe p;
  p.model = &model;
  p.blocks = blocks_of(*model.blocks);
  p.causal = true;
  p.forward = [&model](const data::Batch& b) { return model.forward(b.inputs); };  // (B, N, V)
  p.loss = [](const Tensor& logits, const data::Batch& b) { return nn::cross_entropy(logits, b.targets); };
  p.explained = [](const Tensor& logits) { return sum_of_top(select(logits, 1, logits.size(1) - 1)); };
  p.axis_tokens = [](const data::Batch& b) { return b.inputs; };
  if (!model.config.tie_weights) {
    p.input_tensors = {model.tok_emb->weight};
    if (model.pos_emb) p.input_tensors.push_back(model.pos_emb->weight);  // positions = "learned"
  }
  return p;
}

ObserverScope::ObserverScope(const Probe& probe, std::function<void(int64_t, const nn::AttentionResult&)> callback)
    : blocks_(probe.blocks) {
  for (size_t l = 0; l < blocks_.size(); ++l) {
    previous_.push_back(blocks_[l]->attention_observer);
    blocks_[l]->attention_observer = [callback, l](const nn::AttentionResult& r) { callback(int64_t(l), r); };
  }
}

ObserverScope::~ObserverScope() {
  for (size_t l = 0; l < blocks_.size(); ++l) blocks_[l]->attention_observer = previous_[l];
}

std::pair<Tensor, std::vector<Tensor>> capture_attention(const Probe& probe, const data::Batch& batch) {
  FreezeScope freeze(*probe.model);
  NoGradGuard no_grad;
  std::vector<Tensor> maps(probe.blocks.size());
  Tensor logits;
  {
    ObserverScope scope(probe, [&](int64_t l, const nn::AttentionResult& r) { maps[l] = r.attention; });
    logits = probe.forward(batch);
  }
  for (size_t l = 0; l < maps.size(); ++l)
    if (!maps[l].defined() || maps[l].numel() == 0)
      fail<ValueError>("capture_attention: layer {} ({}) returns no attention probabilities", l,
                       probe.blocks[l]->attn->spec());
  return {logits, maps};
}

Tensor head_mask_of(const nn::TransformerBlock& block, int64_t layer) {
  for (auto& [name, b] : block.attn->named_buffers(/*recurse=*/false))
    if (name == "head_mask") return b;
  fail<ValueError>("layer {} ({}) has no head_mask buffer (head importance and relevance need one)", layer,
                   block.attn->spec());
}

std::vector<std::pair<std::string, std::vector<double>>> gate_values(const nn::Module& model) {
  std::vector<std::pair<std::string, std::vector<double>>> out;
  NoGradGuard no_grad;
  for (auto& [name, m] : model.named_modules()) {
    auto attn = std::dynamic_pointer_cast<nn::Attention>(m);
    if (!attn) continue;
    std::vector<double> g;
    for (auto& [child, c] : attn->named_children())
      if (auto gate = std::dynamic_pointer_cast<nn::HardConcreteGate>(c)) {
        const bool was_training = gate->is_training();
        gate->eval();
        g = gate->forward().to_vector<double>();
        gate->train(was_training);
      }
    if (g.empty())
      for (auto& [b, t] : attn->named_buffers(false))
        if (b == "head_mask") g = t.to_vector<double>();
    if (!g.empty()) out.emplace_back(name, g);
  }
  return out;
}

std::vector<std::pair<std::string, double>> gate_metrics(const nn::Module& model) {
  std::vector<std::pair<std::string, double>> out;
  for (auto& [name, g] : gate_values(model))
    for (size_t i = 0; i < g.size(); ++i) out.emplace_back("gate." + name + "." + std::to_string(i), g[i]);
  return out;
}

FreezeScope::FreezeScope(nn::Module& model) : model_(model), training_(model.is_training()) {
  for (const Tensor& p : model.parameters()) {
    params_.emplace_back(p, p.requires_grad());
    Tensor(p).requires_grad_(false);
  }
  model.eval();
}

FreezeScope::~FreezeScope() {
  for (auto& [p, rg] : params_) p.requires_grad_(rg);
  model_.train(training_);
}

}  // namespace attnlab::analysis
