// einsum: Einstein summation over any number of operands, composed from permute, reshape,
// slice, sum and matmul only, so it has no backward formula of its own (docs/conventions.md, "Few
// primitives").
//
// Semantics follow torch.einsum / numpy.einsum: explicit ("ab,bc->ac") and implicit ("ab,bc",
// output = labels seen exactly once, in ASCII order, after the ellipsis dims) forms, "..." for
// broadcast batch dims, size-1 dims broadcasting against any size, repeated labels within one
// operand taking the diagonal. Operands are contracted pairwise left to right; each pairwise
// step is one batched matmul (B, L, C) @ (B, C, R). docs/einsum.md describes the lowering.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "autograd/ops.hpp"

namespace attnlab {
namespace {

// Labels are small ints. Letters map in ASCII order ('A'..'Z' -> 0..25, 'a'..'z' -> 26..51) so
// that sorting labels sorts the implicit output like NumPy and torch; the i-th dim of the
// broadcast ellipsis shape is label kLetters + i.
constexpr int kLetters = 52;
constexpr int kEllipsis = -1;  // marks where "..." stood in a parsed term

int letter_label(char c) { return std::isupper(static_cast<unsigned char>(c)) ? c - 'A' : 26 + (c - 'a'); }

std::string label_name(int l) {
  if (l >= kLetters) return fmt::format("... dim {}", l - kLetters);
  return std::string(1, l < 26 ? char('A' + l) : char('a' + l - 26));
}

// One term of the equation: letter labels, with kEllipsis where "..." stood.
struct Term {
  std::vector<int> labels;
  bool has_ellipsis = false;
  std::string text;  // as written, for error messages
};

struct Equation {
  std::vector<Term> inputs;
  Term output;
  bool explicit_output = false;
};

// `eq` is the equation as the user wrote it, quoted in every error.
Equation parse(const std::string& eq) {
  Equation out;
  Term* cur = nullptr;
  out.inputs.emplace_back();
  cur = &out.inputs.back();
  for (size_t i = 0; i < eq.size(); ++i) {
    const char c = eq[i];
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    if (std::isalpha(static_cast<unsigned char>(c)) && static_cast<unsigned char>(c) < 128) {
      cur->labels.push_back(letter_label(c));
      cur->text += c;
    } else if (c == '.') {
      if (eq.compare(i, 3, "...") != 0)
        fail<ValueError>("einsum \"{}\": '.' at position {} is not part of an ellipsis \"...\"", eq, i);
      if (cur->has_ellipsis)
        fail<ValueError>("einsum \"{}\": term \"{}...\" has more than one ellipsis \"...\"", eq, cur->text);
      cur->has_ellipsis = true;
      cur->labels.push_back(kEllipsis);
      cur->text += "...";
      i += 2;
    } else if (c == ',' && !out.explicit_output) {
      out.inputs.emplace_back();
      cur = &out.inputs.back();
    } else if (c == '-' && i + 1 < eq.size() && eq[i + 1] == '>' && !out.explicit_output) {
      out.explicit_output = true;
      cur = &out.output;
      ++i;
    } else {
      fail<ValueError>("einsum \"{}\": invalid character '{}' at position {}; expected letters a-z A-Z, ',', "
                       "\"...\" and at most one \"->\"",
                       eq, c, i);
    }
  }
  return out;
}

// An operand during the contraction: a tensor and one distinct label per dim.
struct Operand {
  Tensor t;
  std::vector<int> labels;
};

bool has(const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); }

int64_t size_of(const Operand& op, int l) {
  return op.t.shape()[std::find(op.labels.begin(), op.labels.end(), l) - op.labels.begin()];
}

Dims positions(const Operand& op, const std::vector<int>& labels) {
  Dims order;
  for (int l : labels) order.push_back(std::find(op.labels.begin(), op.labels.end(), l) - op.labels.begin());
  return order;
}

// op permuted so that its labels read `labels` (a permutation of op.labels).
Operand permuted(const Operand& op, const std::vector<int>& labels) {
  Dims order = positions(op, labels);
  bool identity = true;
  for (int i = 0; i < order.size(); ++i) identity &= order[i] == i;
  return {identity ? op.t : permute(op.t, order), labels};
}

// Sums away every label of op not in `keep`.
Operand sum_out(const Operand& op, const std::vector<int>& keep) {
  std::vector<int64_t> dims;
  std::vector<int> kept;
  for (size_t d = 0; d < op.labels.size(); ++d) {
    if (has(keep, op.labels[d]))
      kept.push_back(op.labels[d]);
    else
      dims.push_back(static_cast<int64_t>(d));
  }
  if (dims.empty()) return op;  // sum(x, {}) would sum everything
  return {sum(op.t, dims, false), kept};
}

// Drops a size-1 dim (a broadcast label) without copying.
Operand drop(const Operand& op, int l) {
  Operand out;
  Dims shape;
  for (size_t d = 0; d < op.labels.size(); ++d) {
    if (op.labels[d] == l) continue;
    out.labels.push_back(op.labels[d]);
    shape.push_back(op.t.shape()[d]);
  }
  out.t = reshape(op.t, shape);
  return out;
}

// The diagonal over a label that repeats in one operand ("ii->i", "bii->bi"). The repeated dims
// are moved last and flattened, and the diagonal is a strided slice of that flat dim: for k
// dims of size n, element (j, j, ..., j) sits at j * (n^(k-1) + ... + n + 1). The slice is a
// view; the flatten is a view when the repeated dims are adjacent and contiguous (the usual
// "ii" case) and one copy of the operand otherwise. No n^k mask is ever built.
Operand diagonal(const Operand& op, int l) {
  std::vector<int> rest, order_labels;
  Dims order, shape;
  std::vector<int> reps;
  for (size_t d = 0; d < op.labels.size(); ++d) {
    if (op.labels[d] == l) {
      reps.push_back(static_cast<int>(d));
    } else {
      order.push_back(static_cast<int64_t>(d));
      rest.push_back(op.labels[d]);
      shape.push_back(op.t.shape()[d]);
    }
  }
  const int64_t n = op.t.shape()[reps[0]];
  int64_t flat = 1, step = 0;
  for (int d : reps) {
    order.push_back(d);
    step = step * n + 1;
    flat *= n;
  }
  shape.push_back(flat);
  Tensor t = reshape(permute(op.t, order), shape);
  rest.push_back(l);
  return {slice(t, -1, 0, flat, std::max<int64_t>(step, 1)), rest};
}

// Labels of op from the outermost dim in memory to the innermost (stride order, stable).
// Listing a group of labels in this order keeps their reshape a view whenever possible.
std::vector<int> memory_order(const Operand& op, const std::vector<int>& labels) {
  std::vector<int> out = labels;
  auto stride = [&](int l) {
    return op.t.strides()[std::find(op.labels.begin(), op.labels.end(), l) - op.labels.begin()];
  };
  std::stable_sort(out.begin(), out.end(), [&](int x, int y) { return stride(x) > stride(y); });
  return out;
}

int64_t product(const Operand& op, const std::vector<int>& labels) {
  int64_t n = 1;
  for (int l : labels) n *= size_of(op, l);
  return n;
}

// One pairwise step: labels in both a and b that are `needed` later are batch dims, labels in
// both and nowhere else are contracted, labels in one only stay as free rows (a) or columns
// (b). Callers have already summed away labels that are in one operand and not needed.
//   a (batch..., left..., contracted...) -> (B, L, C)
//   b (batch..., contracted..., right...) -> (B, C, R)
//   a @ b                                 -> (B, L, R) -> (batch..., left..., right...)
Operand contract(const Operand& a, const Operand& b, const std::vector<int>& needed) {
  std::vector<int> batch, contracted, left, right;
  const Operand& big = a.t.numel() >= b.t.numel() ? a : b;
  for (int l : memory_order(big, big.labels)) {
    if (!has(a.labels, l) || !has(b.labels, l)) continue;
    (has(needed, l) ? batch : contracted).push_back(l);
  }
  for (int l : memory_order(a, a.labels))
    if (!has(b.labels, l)) left.push_back(l);
  for (int l : memory_order(b, b.labels))
    if (!has(a.labels, l)) right.push_back(l);

  auto cat = [](std::vector<int> x, const std::vector<int>& y, const std::vector<int>& z) {
    x.insert(x.end(), y.begin(), y.end());
    x.insert(x.end(), z.begin(), z.end());
    return x;
  };
  const int64_t B = product(a, batch), L = product(a, left), C = product(a, contracted), R = product(b, right);
  Tensor a3 = reshape(permuted(a, cat(batch, left, contracted)).t, Dims{B, L, C});   // (B, L, C)
  Tensor b3 = reshape(permuted(b, cat(batch, contracted, right)).t, Dims{B, C, R});  // (B, C, R)
  // Two degenerate shapes skip BLAS: one gemm call per batch element costs ~100 ns of overhead
  // whatever its size, so a Hadamard product (L = C = R = 1) as B gemms of 1x1 matrices ran
  // ~1000x slower than mul, and a batched dot (L = R = 1) ~7x slower than mul + sum. Both
  // replacements compute the same products on the same (B, L, C) / (B, C, R) views.
  Tensor r3;                                                                          // (B, L, R)
  if (C == 1)
    r3 = mul(a3, b3);  // (B, L, 1) * (B, 1, R): nothing to contract, a broadcast product
  else if (L == 1 && R == 1 && C > 1)
    r3 = sum(mul(a3, reshape(b3, Dims{B, 1, C})), {2}, true);  // (B, 1, C) -> (B, 1, 1)
  else
    r3 = matmul(a3, b3);

  Operand out;
  out.labels = cat(batch, left, right);
  Dims shape;
  for (int l : batch) shape.push_back(size_of(a, l));
  for (int l : left) shape.push_back(size_of(a, l));
  for (int l : right) shape.push_back(size_of(b, l));
  out.t = reshape(r3, shape);
  return out;
}

}  // namespace

Tensor einsum(const std::string& eq, const std::vector<Tensor>& operands) {
  Equation e = parse(eq);
  const size_t n = e.inputs.size();
  if (operands.empty()) fail<ValueError>("einsum \"{}\": expected at least one operand, got none", eq);
  if (operands.size() != n)
    fail<ValueError>("einsum \"{}\": the equation has {} operand term{} but {} operand{} given", eq, n,
                     n == 1 ? "" : "s", operands.size(), operands.size() == 1 ? " was" : "s were");
  for (size_t i = 0; i < n; ++i) {
    if (!operands[i].defined()) fail<ValueError>("einsum \"{}\": operand {} is an undefined tensor", eq, i);
    if (!operands[i].is_floating_point())
      fail<DTypeError>("einsum \"{}\": operand {} has dtype {}, expected a floating dtype", eq, i,
                       dtype_name(operands[i].dtype()));
    if (operands[i].dtype() != operands[0].dtype())
      fail<DTypeError>("einsum \"{}\": operand {} has dtype {} but operand 0 has {}; convert with to()", eq, i,
                       dtype_name(operands[i].dtype()), dtype_name(operands[0].dtype()));
  }

  // How many dims each "..." covers; the ellipsis shape is their NumPy broadcast, right-aligned.
  std::vector<int> ell(n, 0);
  int ell_dims = 0;
  for (size_t i = 0; i < n; ++i) {
    const Term& term = e.inputs[i];
    const int letters = static_cast<int>(term.labels.size()) - (term.has_ellipsis ? 1 : 0);
    const int dims = operands[i].dim();
    if (term.has_ellipsis ? letters > dims : letters != dims)
      fail<ShapeError>("einsum \"{}\": term \"{}\" names {} dim{}{} but operand {} has shape {}", eq, term.text,
                       letters, letters == 1 ? "" : "s", term.has_ellipsis ? " besides the ellipsis" : "", i,
                       to_string(operands[i].shape()));
    ell[i] = dims - letters;
    ell_dims = std::max(ell_dims, ell[i]);
  }

  // Each operand with its labels spelled out; label sizes checked (equal, or 1 to broadcast).
  std::vector<Operand> ops(n);
  std::vector<int64_t> size(kLetters + Dims::kMax, -1);
  std::vector<size_t> seen_in(size.size(), 0);
  std::vector<int> count(size.size(), 0);
  for (size_t i = 0; i < n; ++i) {
    ops[i].t = operands[i];
    for (int l : e.inputs[i].labels) {
      if (l != kEllipsis) {
        ops[i].labels.push_back(l);
        continue;
      }
      for (int k = 0; k < ell[i]; ++k) ops[i].labels.push_back(kLetters + ell_dims - ell[i] + k);
    }
    for (size_t d = 0; d < ops[i].labels.size(); ++d) {
      const int l = ops[i].labels[d];
      const int64_t s = operands[i].shape()[d];
      ++count[l];
      for (size_t d2 = 0; d2 < d; ++d2)  // a diagonal needs equal sizes, as in torch
        if (ops[i].labels[d2] == l && operands[i].shape()[d2] != s)
          fail<ShapeError>("einsum \"{}\": label {} repeats in operand {} with sizes {} and {} (shape {}); a "
                           "diagonal needs equal sizes",
                           eq, label_name(l), i, operands[i].shape()[d2], s, to_string(operands[i].shape()));
      if (size[l] == -1 || size[l] == 1) {
        if (size[l] != s) seen_in[l] = i;
        size[l] = s;
      } else if (s != 1 && s != size[l]) {
        fail<ShapeError>("einsum \"{}\": label {} has size {} in operand {} and {} in operand {}", eq, label_name(l),
                         size[l], seen_in[l], s, i);
      }
    }
  }

  // Output labels: as written, or "..." then the labels seen exactly once, in ASCII order.
  std::vector<int> out;
  if (e.explicit_output) {
    for (int l : e.output.labels) {
      if (l == kEllipsis) {
        for (int k = 0; k < ell_dims; ++k) out.push_back(kLetters + k);
        continue;
      }
      if (size[l] == -1)
        fail<ValueError>("einsum \"{}\": output label {} does not appear in any input term", eq, label_name(l));
      if (has(out, l)) fail<ValueError>("einsum \"{}\": output label {} appears more than once", eq, label_name(l));
      out.push_back(l);
    }
  } else {
    for (int k = 0; k < ell_dims; ++k) out.push_back(kLetters + k);
    for (int l = 0; l < kLetters; ++l)
      if (count[l] == 1) out.push_back(l);
  }

  // Labels that operand i or any later one still needs: the output's and those of operands > i.
  auto needed_after = [&](size_t i) {
    std::vector<int> need = out;
    for (size_t j = i + 1; j < n; ++j) need.insert(need.end(), ops[j].labels.begin(), ops[j].labels.end());
    return need;
  };
  auto prepare = [&](size_t i) {
    Operand op = ops[i];
    for (bool again = true; again;) {  // one diagonal per repeated label; each reorders the labels
      again = false;
      for (int l : op.labels) {
        if (std::count(op.labels.begin(), op.labels.end(), l) > 1) {
          op = diagonal(op, l);
          again = true;
          break;
        }
      }
    }
    return op;
  };

  Operand acc = prepare(0);
  for (size_t i = 1; i < n; ++i) {
    Operand b = prepare(i);
    const std::vector<int> need = needed_after(i);
    // A label of size 1 in one operand and larger in the other broadcasts: drop it from the
    // size-1 side, where it contributes the same value for every index.
    for (int l : std::vector<int>(acc.labels)) {
      if (!has(b.labels, l)) continue;
      const int64_t sa = size_of(acc, l), sb = size_of(b, l);
      if (sa == 1 && sb != 1) acc = drop(acc, l);
      if (sb == 1 && sa != 1) b = drop(b, l);
    }
    std::vector<int> keep_a = need, keep_b = need;
    keep_a.insert(keep_a.end(), b.labels.begin(), b.labels.end());
    keep_b.insert(keep_b.end(), acc.labels.begin(), acc.labels.end());
    acc = contract(sum_out(acc, keep_a), sum_out(b, keep_b), need);
  }
  acc = sum_out(acc, out);
  return permuted(acc, out).t;
}

}  // namespace attnlab
