// The L0 head-gate story end to end (docs/attention.md, "Head gates"; Voita et al. 2019, Louizos et
// al. 2018): a gated mha layer trained with loss = task + lambda * nn::l0_penalty(model) closes
// most of its heads exactly (eval-mode gates reach 0), while with lambda = 0 they stay open; the
// closed heads can then be pruned without changing the output.
#include "helpers.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"
#include "nn/transformer.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

struct Trained {
  std::shared_ptr<nn::Attention> layer;
  std::vector<double> gates;  // eval-mode gate values after training
  double heldout_loss;        // eval-mode task loss on fresh inputs
};

// The task: match a fixed teacher mha(heads=4) whose head_mask keeps head 0 only, with its output
// scaled by 10 so that the task outweighs a penalty of order 1. One student head (dk = dv = 2,
// like the teacher's) can do the whole job, so the others are free to close.
Tensor teacher_output(nn::Attention& teacher, const Tensor& x) {
  NoGradGuard ng;
  return teacher.forward(x).output * 10.0;  // (B, N, D)
}

// A student mha(heads=4, gate=hard_concrete) trained by Adam for 800 steps of 8 sequences of 6
// tokens; the run is fixed by its seeds (and identical for any thread count).
Trained train_gated(double lambda) {
  manual_seed(21);
  auto teacher = nn::make_attention("mha(heads=4)", 8);
  {
    NoGradGuard ng;
    Tensor head_mask = teacher->get_buffer("head_mask");
    copy_(head_mask, from_vector<float>({1, 0, 0, 0}));
  }
  teacher->eval();
  auto student = nn::make_attention("mha(heads=4, gate=hard_concrete)", 8);
  student->train();  // gates sample: the relaxation whose expected L0 the penalty is
  optim::Adam opt(student->parameters(), {.lr = 0.03});
  Generator g(121);
  for (int step = 0; step < 800; ++step) {
    Tensor x = randn({8, 6, 8}, g);  // (B, N, D)
    Tensor task = mean(square(student->forward(x).output - teacher_output(*teacher, x)));
    Tensor loss = task + nn::l0_penalty(*student) * lambda;
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  student->eval();
  Generator held(7);
  Tensor x = randn({64, 6, 8}, held);
  const double heldout = mean(square(student->forward(x).output - teacher_output(*teacher, x))).item();
  auto& m = static_cast<nn::MultiHeadAttention&>(*student);
  return {student, m.gate->forward().to_vector<double>(), heldout};
}

}  // namespace

TEST_CASE("L0 penalty training closes heads exactly, without it they stay open") {
  Trained sparse = train_gated(1.0), dense = train_gated(0.0);
  int closed = 0;
  for (size_t i = 0; i < 4; ++i) {
    MESSAGE("head " << i << ": eval gate " << sparse.gates[i] << " (lambda 1), " << dense.gates[i] << " (lambda 0)");
    closed += sparse.gates[i] == 0.0;
  }
  CHECK(closed >= 3);
  for (double gv : dense.gates) CHECK(gv > 0.5);
  CHECK(nn::l0_penalty(*sparse.layer).item() < 0.5 * nn::l0_penalty(*dense.layer).item());
  CHECK(dense.heldout_loss < sparse.heldout_loss);  // sparsity costs some task accuracy

  // The closed heads contribute nothing: pruning them leaves the eval-mode output unchanged.
  std::vector<int64_t> keep;
  for (size_t i = 0; i < sparse.gates.size(); ++i)
    if (sparse.gates[i] != 0.0) keep.push_back(static_cast<int64_t>(i));
  if (keep.empty()) keep.push_back(0);  // prune_heads keeps at least one head (a closed one then)
  auto pruned = sparse.layer->prune_heads(keep);
  pruned->eval();
  Generator g(6);
  Tensor x = randn({2, 5, 8}, g);
  CHECK(allclose(pruned->forward(x).output, sparse.layer->forward(x).output, 1e-5, 1e-6));
}
