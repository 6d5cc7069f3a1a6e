// Tutorial 12: circuits and the phase change. Attention-only transformers (no MLP, no layer
// norm) of 1 and 2 layers trained on sequences with a repeated random segment: the 2-layer model
// forms a previous-token head in layer 0 and an induction head in layer 1 that reads it
// (K-composition), and its loss on the repeated tokens drops after a plateau; the 1-layer model
// cannot. Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"; Olsson et al.
// 2022, "In-context Learning and Induction Heads". Scores: experiments/analysis/circuits.hpp.
#include <algorithm>

#include "experiments/analysis/statistics.hpp"
#include "experiments/tutorial/tutorial.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"
#include "nn/embedding.hpp"
#include "nn/linear.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::say;

namespace {

constexpr int64_t kVocab = 32, kD = 32, kHeads = 4, kDh = kD / kHeads, kN = 24;

// tokens -> embeddings + learned positions -> layers of causal mha added to the residual stream
// -> unembedding. Nothing else, so every path from input to logits goes through attention heads.
class AttentionOnly : public nn::Module {
 public:
  explicit AttentionOnly(int64_t layers) {
    tok = register_module("tok", std::make_shared<nn::Embedding>(kVocab, kD));
    pos = register_module("pos", std::make_shared<nn::Embedding>(kN, kD));
    for (int64_t l = 0; l < layers; ++l)
      attn.push_back(register_module(fmt::format("attn{}", l), std::static_pointer_cast<nn::MultiHeadAttention>(nn::make_attention(
                                                                      fmt::format("mha(heads={}, bias=false)", kHeads), kD))));
    unembed = register_module("unembed", std::make_shared<nn::Linear>(kD, kVocab, false));
    NoGradGuard no_grad;
    copy_(tok->weight, tok->weight * 0.1);  // N(0, 0.1^2): no layer norm rescales the stream
    copy_(pos->weight, pos->weight * 0.1);
  }
  // tokens (B, N) -> logits (B, N, V); maps, when given, receives each layer's (B, h, N, N).
  Tensor forward(const Tensor& tokens, std::vector<Tensor>* maps = nullptr) {
    Tensor x = (*tok)(tokens) + (*pos)(arange(tokens.size(1)));  // (B, N, D)
    for (auto& a : attn) {
      nn::AttentionResult r = a->forward(x, {}, {}, /*causal=*/true, /*need_weights=*/maps != nullptr);
      if (maps) maps->push_back(r.attention);
      x = x + r.output;  // (B, N, D)
    }
    return (*unembed)(x);  // (B, N, V)
  }
  std::shared_ptr<nn::Embedding> tok, pos;
  std::vector<std::shared_ptr<nn::MultiHeadAttention>> attn;
  std::shared_ptr<nn::Linear> unembed;
};

// Each row: random tokens with a segment of K random tokens (K from 4 to 10) repeated right after
// itself at a random place, so neither the segment's length nor its place is fixed and only
// "find the earlier occurrence, copy what followed" predicts the second copy. `scored` marks the
// positions n whose next token n + 1 is inside the second copy (the repeated tokens).
struct Batch {
  Tensor tokens;  // (B, N) int64
  Tensor inputs;  // (B, N - 1): tokens[:, :-1]
  Tensor targets; // (B (N - 1)): tokens[:, 1:], -100 where not scored
};

Batch make_batch(int64_t b, Generator& gen) {
  std::vector<int64_t> t = randint(0, kVocab, {b, kN}, gen).to_vector<int64_t>();
  std::vector<int64_t> target(b * (kN - 1), -100);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t k = 4 + int64_t(gen.next_u64() % 7);              // 4..10
    const int64_t start = int64_t(gen.next_u64() % uint64_t(kN - 2 * k + 1));
    for (int64_t j = 0; j < k; ++j) t[i * kN + start + k + j] = t[i * kN + start + j];
    for (int64_t n = start + k; n < start + 2 * k - 1; ++n) target[i * (kN - 1) + n] = t[i * kN + n + 1];
  }
  Tensor tokens = from_vector(t, {b, kN});
  return {tokens, contiguous(narrow(tokens, 1, 0, kN - 1)), from_vector(target, {b * (kN - 1)})};
}

// Mean cross-entropy on the repeated tokens.
Tensor repeated_loss(AttentionOnly& model, const Batch& b) {
  return nn::cross_entropy(reshape(model.forward(b.inputs), {-1, kVocab}), b.targets);
}

// Trains `model` for `steps` (Adam), printing the loss on the repeated tokens of a fixed test
// batch every `every` steps; returns those losses.
std::vector<double> train(AttentionOnly& model, int steps, int every, const Batch& test, const std::string& name) {
  optim::Adam opt(model.parameters(), {.lr = 1e-2});
  Generator data(120);
  std::vector<double> curve;
  for (int step = 1; step <= steps; ++step) {
    Tensor loss = repeated_loss(model, make_batch(32, data));
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % every == 0) {
      NoGradGuard no_grad;
      curve.push_back(repeated_loss(model, test).item());
    }
  }
  fmt::print("{} loss on the repeated tokens every {} steps:\n ", name, every);
  for (double l : curve) fmt::print(" {:.2f}", l);
  fmt::print("\n");
  return curve;
}

// Head i's weight block of a (h d, D) projection: rows [i d, (i + 1) d), as (d, D).
Tensor rows_of(const Tensor& w, int64_t i) { return narrow(w, 0, i * kDh, kDh); }

double frobenius(const Tensor& m) { return std::sqrt(sum(m * m).item()); }

void lesson() {
  say("A transformer's residual stream is a sum: the embeddings plus what each head writes. A head\n"
      "does two separable things. Its QK circuit, x_q^T W_Q^T W_K x_k, decides where it looks; its OV\n"
      "circuit, W_O W_V, decides what it writes given what it looked at. With no MLPs and no layer\n"
      "norm, every path from token to logit goes through these circuits, so they can be read off.");
  say("The task: random tokens in which a segment of 4 to 10 tokens appears twice in a row at a\n"
      "random place. The first copy is unpredictable; the second copy is predictable by an\n"
      "induction head: 'I am token A; find where A appeared before; the token after it, B, comes\n"
      "next'. Finding 'the token after the earlier A' needs two steps: a layer-0 head writes into\n"
      "each position which token preceded it (a previous-token head), and a layer-1 head matches\n"
      "its query A against that (the keys are built from layer 0's output: K-composition).");
  manual_seed(12);
  Generator test_gen(121);
  const Batch test = make_batch(128, test_gen);
  AttentionOnly one(1), two(2);

  tutorial::section("training: the loss on the repeated tokens");
  say("Chance on the repeated tokens is log(32) = 3.47. A single layer can only raise the tokens\n"
      "already seen (a bag of earlier tokens). The 2-layer model first does the same and sits on a\n"
      "plateau, then drops once the two heads lock together: the phase change.");
  const std::vector<double> c1 = train(one, 500, 25, test, "1 layer ");
  const std::vector<double> c2 = train(two, 500, 25, test, "2 layers");
  const double l1 = c1.back(), l2 = c2.back();
  check(l2 < 0.5 * l1, fmt::format("the 2-layer model's loss on the repeated tokens ({:.2f}) is far below the 1-layer "
                                   "model's ({:.2f}): under half",
                                   l2, l1));

  tutorial::section("per head: previous-token, induction, copying and K-composition scores");
  say("The scores are measured on 64 sequences of 10 random tokens repeated once\n"
      "(experiments/analysis/circuits.hpp; `attnlab analyze` uses the same functions):\n"
      "  previous token: mean weight a token puts on the token just before it;\n"
      "  induction: mean weight a second-copy token puts on the token after its first occurrence;\n"
      "  copying (OV): the share of tokens t for which the head's OV path from embedding to logits,\n"
      "    W_E W_V W_O W_U, ranks t itself first: the head writes the token it attends to;\n"
      "  K-composition (layer 1 head j with layer 0 head i): |W_QK^j W_OV^i|_F / (|W_QK^j|_F |W_OV^i|_F),\n"
      "    how much of head j's key side reads what head i wrote.");
  two.eval();
  Generator probe_gen(122);
  Tensor rep = analysis::repeated_random_tokens(64, 10, kVocab, -1, probe_gen);  // (64, 20)
  std::vector<Tensor> maps;
  {
    NoGradGuard no_grad;
    two.forward(rep, &maps);
  }
  const analysis::CircuitStats c = analysis::circuit_scores(maps, rep, 10, /*causal=*/true);
  NoGradGuard no_grad;
  Tensor E = two.tok->weight, U = two.unembed->weight;  // (V, D), (V, D)
  auto ov = [&](int64_t l, int64_t i) {  // W_O W_V as a (D, D) map of column vectors
    auto& a = *two.attn[size_t(l)];
    return matmul(narrow(a.out_proj->weight, 1, i * kDh, kDh), rows_of(a.v_proj->weight, i));
  };
  auto copying = [&](int64_t l, int64_t i) {
    Tensor m = matmul(matmul(E, transpose(ov(l, i), 0, 1)), transpose(U, 0, 1));  // (V, V): row t = logits from token t
    Tensor top = argmax(m, -1);                                                       // (V)
    return mean(to(eq(top, arange(kVocab)), kFloat64)).item();
  };
  fmt::print("uniform attention would give previous token {:.3f}, induction {:.3f}; copying by chance {:.3f}\n",
             c.previous_uniform, c.induction_uniform, 1.0 / kVocab);
  fmt::print("{:>6} {:>5} {:>15} {:>10} {:>8}\n", "layer", "head", "previous token", "induction", "copying");
  int64_t prev_head = 0, ind_head = 0;
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t i = 0; i < kHeads; ++i) {
      fmt::print("{:>6} {:>5} {:>15.3f} {:>10.3f} {:>8.3f}\n", l, i, c.previous_token[l][i], c.induction[l][i], copying(l, i));
      if (l == 0 && c.previous_token[0][i] > c.previous_token[0][prev_head]) prev_head = i;
      if (l == 1 && c.induction[1][i] > c.induction[1][ind_head]) ind_head = i;
    }
  check(c.previous_token[0][prev_head] > 0.5,
        fmt::format("layer 0 head {} is a previous-token head (mean weight on the previous token {:.2f} > 0.5)",
                    prev_head, c.previous_token[0][prev_head]));
  fmt::print("layer 1 head {} is the strongest induction head (score {:.2f})\n", ind_head, c.induction[1][ind_head]);

  fmt::print("K-composition of layer 1 head j (rows) with layer 0 head i (columns):\n");
  auto& a1 = *two.attn[1];
  for (int64_t j = 0; j < kHeads; ++j) {
    Tensor qk = matmul(transpose(rows_of(a1.q_proj->weight, j), 0, 1), rows_of(a1.k_proj->weight, j));  // (D, D)
    fmt::print("  j = {}:", j);
    for (int64_t i = 0; i < kHeads; ++i) {
      Tensor o = ov(0, i);
      fmt::print(" {:.3f}", frobenius(matmul(qk, o)) / (frobenius(qk) * frobenius(o)));
    }
    fmt::print("\n");
  }

  tutorial::section("ablation: remove the induction heads");
  say("Setting a head's head_mask entry to 0 removes what it writes. Removing only the strongest\n"
      "induction head shows whether it works alone; removing every layer-1 head with the induction\n"
      "role (score >= 0.5 and 0.1 above uniform, as `attnlab analyze` labels it) removes the circuit;\n"
      "removing the layer-0 previous-token heads instead breaks the keys the induction heads match.");
  const analysis::RoleThresholds t;
  std::vector<int64_t> induction_heads, previous_heads;
  for (int64_t i = 0; i < kHeads; ++i) {
    if (c.induction[1][i] >= t.induction && c.induction[1][i] >= c.induction_uniform + t.induction_margin)
      induction_heads.push_back(i);
    if (c.previous_token[0][i] >= t.previous_token && c.previous_token[0][i] >= c.previous_uniform + t.previous_margin)
      previous_heads.push_back(i);
  }
  // The loss on the repeated tokens with `heads` of layer `l` masked out (the mask restored after).
  auto without = [&](int64_t l, const std::vector<int64_t>& heads) {
    Tensor& mask = two.attn[size_t(l)]->head_mask;  // (h)
    for (int64_t i : heads) {
      Tensor entry = narrow(mask, 0, i, 1);  // (1), a view of the buffer
      fill_(entry, 0.0);
    }
    const double loss = repeated_loss(two, test).item();
    fill_(mask, 1.0);
    return loss;
  };
  auto names = [](const std::vector<int64_t>& heads) {
    std::string s;
    for (int64_t i : heads) s += (s.empty() ? "" : ", ") + std::to_string(i);
    return s;
  };
  const double trained = repeated_loss(two, test).item();
  const double one_head = without(1, {ind_head});
  const double all_induction = without(1, induction_heads);
  const double all_previous = without(0, previous_heads);
  fmt::print("loss on the repeated tokens: trained {:.2f}; the 1-layer level {:.2f}\n", trained, l1);
  fmt::print("  without layer 1 head {}: {:.2f}\n", ind_head, one_head);
  fmt::print("  without the induction heads (layer 1 heads {}): {:.2f}\n", names(induction_heads), all_induction);
  fmt::print("  without the previous-token heads (layer 0 heads {}): {:.2f}\n", names(previous_heads), all_previous);
  check(all_induction > 0.5 * l1 && all_induction > 3 * trained,
        "ablating the induction heads brings the loss back to the plateau (over half the 1-layer level, 3x the trained loss)");
  say("Several layer-1 heads learned the same induction pattern, so one alone can be removed at\n"
      "little cost: the others carry the copy. The circuit is the set of heads, and it needs both\n"
      "of its layers.");
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Tutorial 12: circuits, induction heads and the phase change in the loss.", lesson);
}
