#!/usr/bin/python3
"""Golden outputs and gradients from PyTorch for every differentiable attnlab op.

Writes tests/reference/ops_golden.safetensors, which tests/autograd/test_golden.cpp reads, so
that the C++ suite checks attnlab against PyTorch without needing PyTorch. Run it with the
Python that has Debian's python3-torch and python3-numpy (the script re-runs itself under
/usr/bin/python3 when the first python3 in PATH lacks them):

    python3 tests/reference/ops_reference.py

Every case runs twice, in float64 and in float32, on the same values (the float32 inputs are
the float64 ones rounded). For case NAME and dtype tag T (f64 or f32) the file holds:

    NAME.T.in0, NAME.T.in1, ...   the inputs; every floating input requires grad
    NAME.T.out, NAME.T.out1, ...  the outputs (several for split, max with indices, ...)
    NAME.T.grad_out, ...          the upstream gradient of each differentiable output
    NAME.T.grad0, NAME.T.grad1    dL/d in_i for every floating input (zeros if unused)

and the metadata entry "case/NAME" holds the attnlab expression the C++ test evaluates on
`x` (the list of inputs), so the file documents itself. Each case draws from its own
generator seeded by its name, so adding or editing a case leaves every other case unchanged.

Where attnlab defines a value that PyTorch leaves as NaN (a softmax row with nothing
allowed), the expected values are written here explicitly; see masked_rows().
"""
import math
import os
import re
import sys
import zlib

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    # Another python3 earlier in PATH (pyenv, a venv) may lack Debian's numpy and torch.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3", os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit("ops_reference.py needs NumPy and PyTorch 1.13: apt-get install python3-numpy python3-torch")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_lite  # noqa: E402

OUT_PATH = os.path.join(HERE, "ops_golden.safetensors")
DTYPES = {"f64": torch.float64, "f32": torch.float32}
CASES = {}


class Draw:
    """Random inputs for one case, from a generator seeded by the case name."""

    def __init__(self, name):
        self.g = np.random.default_rng(zlib.crc32(name.encode()))

    def randn(self, *shape):
        return self.g.standard_normal(shape)

    def uniform(self, lo, hi, *shape):
        return self.g.uniform(lo, hi, shape)

    def away(self, *shape, lo=0.5):
        """Values with |v| >= lo, for divisors and reciprocals."""
        return np.where(self.g.random(shape) < 0.5, -1.0, 1.0) * (lo + np.abs(self.g.standard_normal(shape)))

    def randint(self, lo, hi, *shape):
        return self.g.integers(lo, hi, shape, dtype=np.int64)

    def mask(self, p, *shape):
        return self.g.random(shape) < p


class Spec:
    """A case's inputs and its PyTorch function.

    upstream(grads, inputs) may edit the drawn upstream gradients; fix(result, inputs) may
    overwrite expected values (numpy arrays in the case's dtype, keyed out, out1, grad0, ...).
    """

    def __init__(self, inputs, fn, upstream=None, fix=None):
        self.inputs, self.fn, self.upstream, self.fix = inputs, fn, upstream, fix


def case(name, expr):
    """Registers a case; `expr` is the attnlab expression test_golden.cpp evaluates."""

    def register(build):
        assert re.fullmatch(r"[a-z0-9_]+", name), name
        assert name not in CASES, name
        CASES[name] = (expr, build)
        return build

    return register


def output_name(k, prefix="out"):
    return prefix if k == 0 else f"{prefix}{k}"


def run(spec, dtype, upstream):
    """Runs spec in `dtype`. `upstream` is the list of upstream gradients (float64 arrays) or
    a function that draws them from the differentiable outputs. Returns (inputs, outputs,
    upstream gradients, input gradients)."""
    leaves = []
    for a in spec.inputs:
        a = np.asarray(a)
        if a.dtype.kind == "f":
            leaves.append(torch.tensor(a, dtype=dtype, requires_grad=True))
        else:
            leaves.append(torch.tensor(a))
    outs = spec.fn(*leaves)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    roots = [o for o in outs if o.requires_grad]
    if callable(upstream):
        upstream = upstream(roots)
    assert len(roots) == len(upstream)
    ups = [torch.tensor(g, dtype=o.dtype) for o, g in zip(roots, upstream)]
    if roots:
        torch.autograd.backward(roots, ups)
    grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves if t.requires_grad]
    return leaves, outs, upstream, grads


def build_case(name, build):
    d = Draw(name)
    spec = build(d)

    def draw_upstream(roots):
        ups = [d.randn(*r.shape) for r in roots]
        return spec.upstream(ups, spec.inputs) if spec.upstream else ups

    # The float64 run draws the upstream gradients; the float32 run reuses them.
    upstream = draw_upstream
    tensors = {}
    for tag, dtype in DTYPES.items():
        leaves, outs, upstream, grads = run(spec, dtype, upstream)
        rec = {}
        for i, t in enumerate(leaves):
            rec[f"in{i}"] = t.detach().numpy()
        for k, o in enumerate(outs):
            rec[output_name(k)] = o.detach().numpy()
        roots = [k for k, o in enumerate(outs) if o.requires_grad]
        for k, g in zip(roots, upstream):
            rec[output_name(k, "grad_out")] = np.asarray(g).astype(outs[k].detach().numpy().dtype)
        floating = [i for i, t in enumerate(leaves) if t.requires_grad]
        for i, g in zip(floating, grads):
            rec[f"grad{i}"] = g.numpy()
        if spec.fix:
            spec.fix(rec, spec.inputs)
        for key, arr in rec.items():
            arr = np.array(arr, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
            if arr.dtype.kind == "f":
                assert not np.isnan(arr).any(), f"{name}.{tag}.{key} has NaN: define the expected value in fix()"
            tensors[f"{name}.{tag}.{key}"] = arr
    return tensors


# ============================ elementwise: binary ============================

@case("add", "x[0] + x[1]")
def _(d):
    return Spec([d.randn(3, 4), d.randn(3, 4)], lambda a, b: a + b)


@case("add_bcast", "x[0] + x[1]  // (2,1,4) + (3,1) -> (2,3,4)")
def _(d):
    return Spec([d.randn(2, 1, 4), d.randn(3, 1)], lambda a, b: a + b)


@case("add_scalar", "x[0] + 1.5")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: a + 1.5)


@case("sub_bcast", "x[0] - x[1]  // (1,4) - (3,1)")
def _(d):
    return Spec([d.randn(1, 4), d.randn(3, 1)], lambda a, b: a - b)


@case("rsub_scalar", "2.0 - x[0]")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: 2.0 - a)


@case("mul_bcast", "x[0] * x[1]  // (2,3,1) * (1,4)")
def _(d):
    return Spec([d.randn(2, 3, 1), d.randn(1, 4)], lambda a, b: a * b)


@case("mul_transposed", "transpose(x[0], 0, 1) * x[1]  // non-contiguous left operand")
def _(d):
    return Spec([d.randn(4, 3), d.randn(3, 4)], lambda a, b: a.transpose(0, 1) * b)


@case("mul_scalar", "x[0] * -2.5")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: a * -2.5)


@case("mul_self", "x[0] * x[0] + sin(x[0])  // one leaf used three times: gradients accumulate")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: a * a + torch.sin(a))


@case("div_bcast", "x[0] / x[1]  // (3,4) / (4,)")
def _(d):
    return Spec([d.randn(3, 4), d.away(4)], lambda a, b: a / b)


@case("div_scalar", "x[0] / 4.0")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: a / 4.0)


@case("rdiv_scalar", "3.0 / x[0]")
def _(d):
    return Spec([d.away(3, 4)], lambda a: 3.0 / a)


@case("pow", "pow(x[0], x[1])  // positive base")
def _(d):
    return Spec([d.uniform(0.5, 2.0, 3, 4), d.randn(3, 4)], lambda a, b: torch.pow(a, b))


@case("pow_bcast", "pow(x[0], x[1])  // (3,1) ^ (4,)")
def _(d):
    return Spec([d.uniform(0.5, 2.0, 3, 1), d.randn(4)], lambda a, b: torch.pow(a, b))


@case("pow_zero", "pow(x[0], x[1])  // base 0 with exponents 0, 1, 2, 3 and 0^0: PyTorch's limits")
def _(d):
    a = np.array([0.0, 0.0, 0.0, 0.0, 1.5, 0.7, 2.0, 0.0])
    b = np.array([0.0, 1.0, 2.0, 3.0, 0.0, 2.5, -1.0, 2.0])
    return Spec([a, b], lambda a, b: torch.pow(a, b))


@case("pow_scalar", "pow(x[0], 2.5)")
def _(d):
    return Spec([d.uniform(0.5, 2.0, 3, 4)], lambda a: torch.pow(a, 2.5))


@case("pow_scalar_int", "pow(x[0], 3.0) + pow(x[0], 2.0) + pow(x[0], 1.0)  // negative bases")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: torch.pow(a, 3.0) + torch.pow(a, 2.0) + torch.pow(a, 1.0))


@case("pow_scalar_half", "pow(x[0], 0.5) + pow(x[0], 0.0)")
def _(d):
    return Spec([d.uniform(0.5, 2.0, 3, 4)], lambda a: torch.pow(a, 0.5) + torch.pow(a, 0.0))


@case("rpow_scalar", "pow(2.0, x[0])")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: torch.pow(2.0, a))


def with_ties(d, shape, other):
    """Draws a tensor equal to `other` (broadcast) at about a third of its elements."""
    a = d.randn(*shape)
    tie = d.mask(0.35, *shape)
    return np.where(tie, np.broadcast_to(other, shape), a)


@case("maximum", "maximum(x[0], x[1])  // (3,4) vs (4,), with ties: the gradient splits evenly")
def _(d):
    b = d.randn(4)
    return Spec([with_ties(d, (3, 4), b), b], lambda a, b: torch.maximum(a, b))


@case("minimum", "minimum(x[0], x[1])  // (3,4) vs (3,4), with ties")
def _(d):
    b = d.randn(3, 4)
    return Spec([with_ties(d, (3, 4), b), b], lambda a, b: torch.minimum(a, b))


# ============================ elementwise: unary ============================

UNARY = {
    # name: (attnlab expression, torch function, input drawer)
    "neg": ("neg(x[0])", torch.neg, lambda d: d.randn(3, 4)),
    "exp": ("exp(x[0])", torch.exp, lambda d: d.randn(3, 4)),
    "log": ("log(x[0])", torch.log, lambda d: d.uniform(0.1, 3.0, 3, 4)),
    "sqrt": ("sqrt(x[0])", torch.sqrt, lambda d: d.uniform(0.1, 3.0, 3, 4)),
    "rsqrt": ("rsqrt(x[0])", torch.rsqrt, lambda d: d.uniform(0.1, 3.0, 3, 4)),
    "abs": ("abs(x[0])  // with zeros: the gradient there is 0", torch.abs,
            lambda d: np.where(d.mask(0.25, 3, 4), 0.0, d.randn(3, 4))),
    "square": ("square(x[0])", torch.square, lambda d: d.randn(3, 4)),
    "reciprocal": ("reciprocal(x[0])", torch.reciprocal, lambda d: d.away(3, 4)),
    "sin": ("sin(x[0])", torch.sin, lambda d: 2 * d.randn(3, 4)),
    "cos": ("cos(x[0])", torch.cos, lambda d: 2 * d.randn(3, 4)),
    "tanh": ("tanh(x[0])", torch.tanh, lambda d: 2 * d.randn(3, 4)),
    "sigmoid": ("sigmoid(x[0])  // includes +-20 and +-40", torch.sigmoid,
                lambda d: np.concatenate([3 * d.randn(2, 4), [[-40.0, -20.0, 20.0, 40.0]]])),
    "relu": ("relu(x[0])  // with zeros: the gradient there is 0", torch.relu,
             lambda d: np.where(d.mask(0.25, 3, 4), 0.0, d.randn(3, 4))),
    "gelu": ('gelu(x[0])  // approximate = "none" (erf)', F.gelu, lambda d: 2 * d.randn(3, 4)),
    "gelu_tanh": ('gelu(x[0], "tanh")', lambda a: F.gelu(a, approximate="tanh"), lambda d: 2 * d.randn(3, 4)),
    "elu": ("elu(x[0])  // with zeros", F.elu, lambda d: np.where(d.mask(0.25, 3, 4), 0.0, d.randn(3, 4))),
    "elu_alpha": ("elu(x[0], 0.7)", lambda a: F.elu(a, alpha=0.7), lambda d: d.randn(3, 4)),
    "softplus": ("softplus(x[0])  // includes values past the threshold 20", F.softplus,
                 lambda d: np.concatenate([3 * d.randn(2, 4), [[-25.0, 19.5, 20.5, 30.0]]])),
    "softplus_beta": ("softplus(x[0], 2.0, 5.0)  // beta 2, threshold 5", lambda a: F.softplus(a, beta=2.0, threshold=5.0),
                      lambda d: 3 * d.randn(3, 4)),
    "clamp": ("clamp(x[0], -0.5, 0.75)  // includes both bounds exactly: gradient 1 there",
              lambda a: torch.clamp(a, -0.5, 0.75),
              lambda d: np.concatenate([d.randn(2, 4), [[-0.5, 0.75, -0.5, 0.75]]])),
    "clamp_min": ("clamp_min(x[0], 0.25)", lambda a: torch.clamp(a, min=0.25), lambda d: d.randn(3, 4)),
    "clamp_max": ("clamp_max(x[0], 0.25)", lambda a: torch.clamp(a, max=0.25), lambda d: d.randn(3, 4)),
}


def register_unary(name, expr, fn, draw):
    case(name, expr)(lambda d: Spec([draw(d)], fn))


for _name, (_expr, _fn, _draw) in UNARY.items():
    register_unary(_name, _expr, _fn, _draw)


@case("exp_permuted", "exp(permute(x[0], {2, 0, 1}))  // non-contiguous input")
def _(d):
    return Spec([d.randn(3, 4, 2)], lambda a: torch.exp(a.permute(2, 0, 1)))


@case("tanh_strided", "tanh(slice(x[0], 1, 0, 6, 2))  // every other column")
def _(d):
    return Spec([d.randn(3, 6)], lambda a: torch.tanh(a[:, 0:6:2]))


@case("where", "where(x[0], x[1], x[2])  // cond (3,4), a (3,4), b (4,) broadcast")
def _(d):
    return Spec([d.mask(0.5, 3, 4), d.randn(3, 4), d.randn(4)], lambda c, a, b: torch.where(c, a, b))


@case("where_scalar", "where(x[0], x[1], 0.5)")
def _(d):
    return Spec([d.mask(0.5, 3, 4), d.randn(3, 4)], lambda c, a: torch.where(c, a, torch.tensor(0.5, dtype=a.dtype)))


@case("masked_fill", "masked_fill(x[0], x[1], -1.25)  // x (2,3,4), mask (3,1) broadcast")
def _(d):
    return Spec([d.randn(2, 3, 4), d.mask(0.5, 3, 1)], lambda a, m: a.masked_fill(m, -1.25))


# ============================ reductions ============================

@case("sum_all", "sum(x[0])")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: a.sum())


@case("sum_dims", "sum(x[0], {0, 2})")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: a.sum(dim=(0, 2)))


@case("sum_keepdim", "sum(x[0], {-2}, true)")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: a.sum(dim=-2, keepdim=True))


@case("sum_transposed", "sum(transpose(x[0], 0, 2), {-1})  // non-contiguous input")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: a.transpose(0, 2).sum(dim=-1))


@case("mean_all", "mean(x[0])")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: a.mean())


@case("mean_dims", "mean(x[0], {1, 2}, true)")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: a.mean(dim=(1, 2), keepdim=True))


@case("var", "var(x[0], {-1})  // correction 1")
def _(d):
    return Spec([d.randn(3, 5)], lambda a: torch.var(a, dim=-1, correction=1))


@case("var_c0", "var(x[0], {0, 2}, 0, true)  // correction 0, keepdim")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: torch.var(a, dim=(0, 2), correction=0, keepdim=True))


@case("var_all", "var(x[0], {})  // every dim, correction 1")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: torch.var(a, dim=None, correction=1))


@case("max_all", "max(x[0])  // no ties")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: a.max())


@case("min_all", "min(x[0])  // no ties")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: a.min())


@case("max_all_ties", "max(x[0])  // the max appears 3 times: PyTorch splits the gradient evenly")
def _(d):
    a = d.randn(3, 4)
    a[0, 1] = a[1, 3] = a[2, 0] = 5.0
    return Spec([a], lambda a: a.max())


@case("max_dim", "max(x[0], 1)  // values and indices, no ties")
def _(d):
    return Spec([d.randn(3, 4, 2)], lambda a: tuple(torch.max(a, dim=1)))


@case("max_dim_keepdim", "max(x[0], -1, true)")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: tuple(torch.max(a, dim=-1, keepdim=True)))


@case("min_dim", "min(x[0], 0)")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: tuple(torch.min(a, dim=0)))


@case("amax", "amax(x[0], {-1})  // no ties")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: torch.amax(a, dim=-1))


@case("amax_dims", "amax(x[0], {0, 2}, true)")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: torch.amax(a, dim=(0, 2), keepdim=True))


@case("amax_ties", "amax(x[0], {-1})  // row maxima repeated: PyTorch splits the gradient evenly")
def _(d):
    a = d.randn(3, 4)
    a[0, 1] = a[0, 2] = 4.0
    a[2, :] = 1.5
    return Spec([a], lambda a: torch.amax(a, dim=-1))


@case("logsumexp", "logsumexp(x[0], {-1})")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: torch.logsumexp(a, dim=-1))


@case("logsumexp_dims", "logsumexp(x[0], {0, 1}, true)  // includes large values (stability)")
def _(d):
    a = d.randn(2, 3, 4)
    a[1, 2, :] += 500.0
    return Spec([a], lambda a: torch.logsumexp(a, dim=(0, 1), keepdim=True))


# ============================ softmax ============================

def masked_rows(dim, log):
    """fix() for a masked (log-)softmax whose mask leaves some rows with nothing allowed.

    PyTorch (masked_fill with -inf, then softmax) gives NaN there. attnlab defines such a row's
    output as zeros (softmax) or -inf (log_softmax) with a zero gradient, so those are the
    expected values, written here rather than taken from PyTorch.
    """

    def fix(rec, inputs):
        x, mask = inputs
        mask = np.broadcast_to(mask, x.shape)
        empty = np.broadcast_to(~mask.any(axis=dim, keepdims=True), x.shape)
        assert empty.any(), "this case is meant to have a fully masked row"
        rec["out"] = np.where(empty, -np.inf if log else 0.0, rec["out"]).astype(rec["out"].dtype)
        rec["grad0"] = np.where(empty, 0.0, rec["grad0"]).astype(rec["grad0"].dtype)

    return fix


def zero_masked_upstream(grads, inputs):
    """log_softmax's masked outputs are the constant -inf in attnlab, so no gradient flows
    from them; PyTorch differentiates -inf - logsumexp and would pass a nonzero upstream
    gradient there into the unmasked entries. Zero upstream at masked entries is the case
    where the two definitions agree (and the only one a finite loss produces)."""
    x, mask = inputs
    return [np.where(np.broadcast_to(mask, x.shape), grads[0], 0.0)]


@case("softmax", "softmax(x[0], -1)")
def _(d):
    return Spec([d.randn(3, 5)], lambda a: torch.softmax(a, -1))


@case("softmax_dim0", "softmax(x[0], 0)  // a non-last dim")
def _(d):
    return Spec([d.randn(4, 3, 2)], lambda a: torch.softmax(a, 0))


@case("softmax_transposed", "softmax(transpose(x[0], 0, 1), -1)  // non-contiguous input")
def _(d):
    return Spec([d.randn(5, 3)], lambda a: torch.softmax(a.transpose(0, 1), -1))


@case("softmax_masked", "softmax(x[0], -1, x[1])  // row 1 fully masked: zeros (attnlab's definition)")
def _(d):
    m = d.mask(0.6, 4, 5)
    m[0, :] = True
    m[1, :] = False
    m[2, :] = False
    m[2, 3] = True
    return Spec([d.randn(4, 5), m], lambda a, m: torch.softmax(a.masked_fill(~m, -np.inf), -1),
                fix=masked_rows(-1, False))


@case("softmax_masked_bcast", "softmax(x[0], -1, x[1])  // (2,4,4) with a causal (4,4) mask")
def _(d):
    m = np.tril(np.ones((4, 4), dtype=bool))
    return Spec([d.randn(2, 4, 4), m], lambda a, m: torch.softmax(a.masked_fill(~m, -np.inf), -1))


@case("log_softmax", "log_softmax(x[0], 1)")
def _(d):
    return Spec([d.randn(3, 4, 2)], lambda a: torch.log_softmax(a, 1))


@case("log_softmax_masked", "log_softmax(x[0], -1, x[1])  // row 2 fully masked: -inf, zero gradient")
def _(d):
    m = d.mask(0.6, 4, 5)
    m[0, :] = True
    m[1, 0] = True
    m[2, :] = False
    return Spec([d.randn(4, 5), m], lambda a, m: torch.log_softmax(a.masked_fill(~m, -np.inf), -1),
                upstream=zero_masked_upstream, fix=masked_rows(-1, True))


# ============================ products ============================

@case("matmul", "matmul(x[0], x[1])  // (3,4) @ (4,5)")
def _(d):
    return Spec([d.randn(3, 4), d.randn(4, 5)], torch.matmul)


@case("matmul_batched_bcast", "matmul(x[0], x[1])  // (2,1,3,4) @ (5,4,2) -> (2,5,3,2)")
def _(d):
    return Spec([d.randn(2, 1, 3, 4), d.randn(5, 4, 2)], torch.matmul)


@case("matmul_batched_weight", "matmul(x[0], x[1])  // (2,3,4) @ (4,5): a linear layer's weight")
def _(d):
    return Spec([d.randn(2, 3, 4), d.randn(4, 5)], torch.matmul)


@case("matmul_transposed", "matmul(transpose(x[0], -2, -1), transpose(x[1], 0, 1))  // (2,4,3)^T @ (5,4)^T")
def _(d):
    return Spec([d.randn(2, 4, 3), d.randn(5, 4)], lambda a, b: torch.matmul(a.transpose(-2, -1), b.transpose(0, 1)))


@case("matmul_vec_mat", "matmul(x[0], x[1])  // (4) @ (2,4,3)")
def _(d):
    return Spec([d.randn(4), d.randn(2, 4, 3)], torch.matmul)


@case("matmul_mat_vec", "matmul(x[0], x[1])  // (2,3,4) @ (4)")
def _(d):
    return Spec([d.randn(2, 3, 4), d.randn(4)], torch.matmul)


@case("matmul_dot", "matmul(x[0], x[1])  // (4) @ (4) -> scalar")
def _(d):
    return Spec([d.randn(4), d.randn(4)], torch.matmul)


EINSUM = {
    # name: (equation, operand shapes)
    "einsum_attention": ("bhnd,bhmd->bhnm", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    "einsum_ellipsis": ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    "einsum_three": ("bnr,hr,bmr->bhnm", [(2, 3, 4), (2, 4), (2, 5, 4)]),
    "einsum_diagonal": ("ii->i", [(4, 4)]),
    "einsum_sum": ("ij->", [(3, 4)]),
    "einsum_outer": ("i,j->ij", [(3,), (4,)]),
}


def register_einsum(name, equation, shapes):
    case(name, f'einsum("{equation}", {{x[0], ...}})')(
        lambda d: Spec([d.randn(*s) for s in shapes], lambda *ops: torch.einsum(equation, *ops)))


for _name, (_eq, _shapes) in EINSUM.items():
    register_einsum(_name, _eq, _shapes)


# ============================ structure and indexing ============================

@case("cat", "cat({x[0], x[1], x[2]}, 0)")
def _(d):
    return Spec([d.randn(2, 3), d.randn(1, 3), d.randn(3, 3)], lambda a, b, c: torch.cat([a, b, c], 0))


@case("cat_last_transposed", "cat({transpose(x[0], 0, 1), x[1]}, -1)")
def _(d):
    return Spec([d.randn(2, 3), d.randn(3, 4)], lambda a, b: torch.cat([a.transpose(0, 1), b], -1))


@case("stack", "stack({x[0], x[1], x[2]}, 1)")
def _(d):
    return Spec([d.randn(2, 3), d.randn(2, 3), d.randn(2, 3)], lambda a, b, c: torch.stack([a, b, c], 1))


@case("split", "split(x[0], 2, 1)  // sizes 2, 2, 1")
def _(d):
    return Spec([d.randn(3, 5)], lambda a: torch.split(a, 2, 1))


@case("split_sizes", "split(x[0], {1, 3}, 0)")
def _(d):
    return Spec([d.randn(4, 2)], lambda a: torch.split(a, [1, 3], 0))


@case("chunk", "chunk(x[0], 3, -1)")
def _(d):
    return Spec([d.randn(2, 7)], lambda a: torch.chunk(a, 3, -1))


@case("gather", "gather(x[0], 1, x[1])  // repeated indices accumulate")
def _(d):
    return Spec([d.randn(3, 4), d.randint(0, 4, 3, 5)], lambda a, i: torch.gather(a, 1, i))


@case("gather_dim0", "gather(x[0], 0, x[1])")
def _(d):
    return Spec([d.randn(3, 4), d.randint(0, 3, 2, 4)], lambda a, i: torch.gather(a, 0, i))


@case("scatter_add", "scatter_add(x[0], 0, x[1], x[2])  // repeated indices")
def _(d):
    return Spec([d.randn(3, 4), d.randint(0, 3, 5, 4), d.randn(5, 4)],
                lambda s, i, src: torch.scatter_add(s, 0, i, src))


@case("scatter_add_dim1", "scatter_add(x[0], 1, x[1], x[2])")
def _(d):
    return Spec([d.randn(2, 5), d.randint(0, 5, 2, 3), d.randn(2, 3)],
                lambda s, i, src: torch.scatter_add(s, 1, i, src))


@case("index_select", "index_select(x[0], 0, x[1])  // repeated indices")
def _(d):
    return Spec([d.randn(4, 3), np.array([2, 0, 2, 3, 2])], lambda a, i: torch.index_select(a, 0, i))


@case("index_select_dim1", "index_select(x[0], 1, x[1])")
def _(d):
    return Spec([d.randn(2, 4, 3), np.array([3, 1, 1])], lambda a, i: torch.index_select(a, 1, i))


@case("embedding", "embedding(x[0], x[1])  // (5,3) table, (2,4) indices with repeats")
def _(d):
    return Spec([d.randn(5, 3), np.array([[0, 4, 4, 1], [2, 0, 4, 3]])], lambda w, i: F.embedding(i, w))


@case("cumsum", "cumsum(x[0], -1)")
def _(d):
    return Spec([d.randn(3, 5)], lambda a: torch.cumsum(a, -1))


@case("cumsum_dim0", "cumsum(x[0], 0)")
def _(d):
    return Spec([d.randn(4, 2, 3)], lambda a: torch.cumsum(a, 0))


@case("topk", "topk(x[0], 2)  // largest, sorted, along the last dim")
def _(d):
    return Spec([d.randn(3, 5)], lambda a: tuple(torch.topk(a, 2)))


@case("topk_smallest", "topk(x[0], 3, 0, false)")
def _(d):
    return Spec([d.randn(5, 3)], lambda a: tuple(torch.topk(a, 3, 0, largest=False)))


@case("sort", "sort(x[0])")
def _(d):
    return Spec([d.randn(3, 5)], lambda a: tuple(torch.sort(a)))


@case("sort_desc_dim0", "sort(x[0], 0, true)")
def _(d):
    return Spec([d.randn(4, 3)], lambda a: tuple(torch.sort(a, 0, descending=True)))


@case("tril", "tril(x[0])  // batched (2,4,4)")
def _(d):
    return Spec([d.randn(2, 4, 4)], lambda a: torch.tril(a))


@case("tril_neg", "tril(x[0], -1)  // (3,5)")
def _(d):
    return Spec([d.randn(3, 5)], lambda a: torch.tril(a, -1))


@case("triu", "triu(x[0], 1)  // (5,3)")
def _(d):
    return Spec([d.randn(5, 3)], lambda a: torch.triu(a, 1))


# ============================ views and copies ============================

@case("reshape", "reshape(x[0], {4, -1})")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: a.reshape(4, -1))


@case("reshape_copy", "reshape(transpose(x[0], 0, 1), {-1})  // needs a copy")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: a.transpose(0, 1).reshape(-1))


@case("view", "view(x[0], {3, 2, 4})")
def _(d):
    return Spec([d.randn(6, 4)], lambda a: a.view(3, 2, 4))


@case("flatten", "flatten(x[0], 1)")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: torch.flatten(a, 1))


@case("permute", "permute(x[0], {2, 0, 1})")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: a.permute(2, 0, 1))


@case("transpose", "transpose(x[0], 0, -1)")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: a.transpose(0, -1))


@case("narrow", "narrow(x[0], 1, 1, 2)")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: a.narrow(1, 1, 2))


@case("slice_step", "slice(x[0], 0, 1, 6, 2)  // rows 1, 3, 5")
def _(d):
    return Spec([d.randn(7, 3)], lambda a: a[1:6:2])


@case("slice_negative", "slice(x[0], -1, -3, 5)  // last 3 columns")
def _(d):
    return Spec([d.randn(2, 5)], lambda a: a[:, -3:])


@case("select", "select(x[0], 1, -1)")
def _(d):
    return Spec([d.randn(2, 3, 4)], lambda a: a.select(1, -1))


@case("expand", "expand(x[0], {2, 3, -1})  // (1,4) -> (2,3,4)")
def _(d):
    return Spec([d.randn(1, 4)], lambda a: a.expand(2, 3, -1))


@case("broadcast_to", "broadcast_to(x[0], {2, 3, 4})  // (3,1)")
def _(d):
    return Spec([d.randn(3, 1)], lambda a: torch.broadcast_to(a, (2, 3, 4)))


@case("squeeze", "squeeze(x[0])")
def _(d):
    return Spec([d.randn(1, 3, 1, 2)], lambda a: a.squeeze())


@case("squeeze_dim", "squeeze(x[0], 2)")
def _(d):
    return Spec([d.randn(1, 3, 1, 2)], lambda a: a.squeeze(2))


@case("unsqueeze", "unsqueeze(x[0], -1)")
def _(d):
    return Spec([d.randn(3, 2)], lambda a: a.unsqueeze(-1))


@case("contiguous", "contiguous(transpose(x[0], 0, 1))")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: a.transpose(0, 1).contiguous())


@case("clone", "clone(x[0]) * 2.0")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: a.clone() * 2.0)


@case("to_other", "to(x[0], other dtype)  // f64 -> float32, f32 -> float64")
def _(d):
    return Spec([d.randn(3, 4)], lambda a: a.to(torch.float32 if a.dtype == torch.float64 else torch.float64))


# ============================ layers composed from ops ============================

@case("layer_norm", "(x - mean(x,{-1},true)) * rsqrt(var(x,{-1},0,true) + 1e-5) * w + b  vs F.layer_norm")
def _(d):
    return Spec([d.randn(2, 3, 8), 1 + 0.1 * d.randn(8), 0.1 * d.randn(8)],
                lambda x, w, b: F.layer_norm(x, (8,), w, b, 1e-5))


@case("mlp_gelu", "matmul(gelu(matmul(x, W1^T) + b1), W2^T) + b2  vs F.linear")
def _(d):
    return Spec([d.randn(4, 6), 0.4 * d.randn(8, 6), 0.1 * d.randn(8), 0.4 * d.randn(3, 8), 0.1 * d.randn(3)],
                lambda x, w1, b1, w2, b2: F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2))


@case("attention", "matmul(softmax(matmul(q, k^T) / sqrt(d), -1, mask), v)  // (B,h,T,d), causal + key padding")
def _(d):
    B, h, T, dk = 2, 2, 5, 4
    causal = np.tril(np.ones((T, T), dtype=bool))
    keep = np.ones((B, 1, 1, T), dtype=bool)
    keep[1, :, :, 3:] = False  # batch 1: the last two keys are padding
    mask = causal[None, None] & keep  # (B, 1, T, T)

    def attention(q, k, v, m):
        s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(dk)  # (B, h, T, T)
        return torch.matmul(torch.softmax(s.masked_fill(~m, -np.inf), -1), v)  # (B, h, T, d)

    return Spec([d.randn(B, h, T, dk), d.randn(B, h, T, dk), d.randn(B, h, T, dk), mask], attention)


# ============================ fused training-step ops ============================

@case("layer_norm_fused", "layer_norm(x, w, b, 1e-5)  // the fused op, (2,3,8)")
def _(d):
    return Spec([d.randn(2, 3, 8), 1 + 0.1 * d.randn(8), 0.1 * d.randn(8)],
                lambda x, w, b: F.layer_norm(x, (8,), w, b, 1e-5))


@case("layer_norm_fused_plain", "layer_norm(x, {}, {}, 1e-3)  // no weight or bias, rows of 20")
def _(d):
    return Spec([2 + 3 * d.randn(3, 20)], lambda x: F.layer_norm(x, (20,), None, None, 1e-3))


@case("add_layer_norm", "add_layer_norm(x, r, w, b, 1e-5) -> {sum, normed}  // r (3,8) broadcast to x (2,3,8)")
def _(d):
    def add_ln(x, r, w, b):
        s = x + r
        return s, F.layer_norm(s, (8,), w, b, 1e-5)

    return Spec([d.randn(2, 3, 8), d.randn(3, 8), 1 + 0.1 * d.randn(8), 0.1 * d.randn(8)], add_ln)


@case("bias_gelu", "bias_gelu(x, b)  // gelu(x + b), b (8) along the last dim of x (4,8)")
def _(d):
    return Spec([2 * d.randn(4, 8), d.randn(8)], lambda x, b: F.gelu(x + b))


@case("bias_gelu_tanh", 'bias_gelu(x, b, "tanh")  // (2,3,8)')
def _(d):
    return Spec([2 * d.randn(2, 3, 8), d.randn(8)], lambda x, b: F.gelu(x + b, approximate="tanh"))


# ============================ writing the file ============================

def main():
    tensors, metadata = {}, {
        "generator": "tests/reference/ops_reference.py",
        "torch_version": torch.__version__,
        "layout": "NAME.{f64,f32}.{in<i>,out[<k>],grad_out[<k>],grad<i>}; case/NAME = attnlab expression",
    }
    for name, (expr, build) in CASES.items():
        tensors.update(build_case(name, build))
        metadata[f"case/{name}"] = expr
    safetensors_lite.save(OUT_PATH, tensors, metadata)
    size = os.path.getsize(OUT_PATH)
    print(f"wrote {OUT_PATH}: {len(CASES)} cases, {len(tensors)} tensors, {size / 1024:.0f} KiB")
    if size > 300 * 1024:
        sys.exit("ops_golden.safetensors is over 300 KiB: use smaller inputs")


if __name__ == "__main__":
    main()
