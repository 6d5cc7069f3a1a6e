"""What the attention reference scripts share (attention, patterns, blocks, cluster, lowrank and
kernelmix_reference.py): the shared conventions' pieces every variant uses (masked softmax with
empty rows, head split/merge, the Hard Concrete gate in eval mode, head_mask and out_proj),
seeded random weights, and the case records tests/golden.hpp reads:

    CASE/w/<name>         every parameter and persistent buffer (random, not the defaults)
    CASE/x, CASE/context  inputs (context only for cross-attention)
    CASE/mask             the bool "allowed" mask (when the case has one)
    CASE/grad_output      upstream gradient of the output
    CASE/output           expected output (B, N, D)
    CASE/attention        expected probabilities (B, h, N, M), for variants that have them
    CASE/grad.x, CASE/grad.context, CASE/grad.<param>, CASE/grad.head_mask
                          gradients of sum(output * grad_output)

with metadata "CASE/spec" and "CASE/d_model". Everything is float64; each case draws from its
own generator seeded by its name, so editing one case leaves the others' data unchanged.

Importing this module re-runs the calling script under /usr/bin/python3 when the current
interpreter lacks NumPy or PyTorch, and makes float64 torch's default dtype.
"""
import os
import sys
import zlib

try:
    import numpy as np
    import torch
    import torch.nn as tnn
except ImportError:
    _script = os.path.abspath(sys.argv[0])
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3", _script] + sys.argv[1:])
    sys.exit(f"{os.path.basename(_script)} needs NumPy and PyTorch 1.13: apt-get install python3-numpy python3-torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_lite  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
torch.set_default_dtype(torch.float64)


# ---- docs/attention.md: conventions and head gates ----

def masked_softmax(s, allowed):
    """softmax over the last dim of s (..., N, M) where `allowed` (broadcastable; None = all) is
    true; a row with nothing allowed is all zeros with zero gradient. (PyTorch's softmax of an
    all -inf row is NaN, so the empty rows are kept finite and then zeroed.)"""
    if allowed is None:
        return torch.softmax(s, -1)
    allowed = allowed.expand_as(s)
    row_any = allowed.any(-1, keepdim=True)
    s = s.masked_fill(~allowed, float("-inf"))
    s = torch.where(row_any, s, torch.zeros_like(s))  # keeps the empty rows finite
    return torch.softmax(s, -1) * allowed


def split_heads(t, h):
    b, n, hd = t.shape
    return t.view(b, n, h, hd // h).transpose(1, 2)  # (B, h, N, d)


def merge_heads(t):
    b, h, n, d = t.shape
    return t.transpose(1, 2).reshape(b, n, h * d)  # (B, N, h*d)


class Gate(tnn.Module):
    """Hard Concrete gate, eval mode: g = clamp(sigmoid(log_alpha) (zeta - gamma) + gamma, 0, 1)."""

    def __init__(self, h, gamma=-0.1, zeta=1.1):
        super().__init__()
        self.log_alpha = tnn.Parameter(torch.full((h,), 2.0))
        self.gamma, self.zeta = gamma, zeta

    def forward(self):
        return torch.clamp(torch.sigmoid(self.log_alpha) * (self.zeta - self.gamma) + self.gamma, 0.0, 1.0)


class Heads(tnn.Module):
    """What every multi-head variant shares after its probabilities: optional gate, head_mask,
    out_proj. Subclasses register their projections (out_proj included), then call init_heads."""

    gate_type = Gate

    def init_heads(self, h, gate):
        if gate:
            self.gate = self.gate_type(h)
        self.register_buffer("head_mask", torch.ones(h))

    def head_scale(self):
        s = self.gate() * self.head_mask if hasattr(self, "gate") else self.head_mask  # (h)
        return s.view(1, -1, 1, 1)

    def finish(self, o):
        """out_proj of the scaled head outputs o (B, h, N, dv) -> (B, N, D)."""
        return self.out_proj(merge_heads(o * self.head_scale()))


class Projected(Heads):
    """The MHA projections, gate and head_mask; `kv_heads` widens k_proj/v_proj (compressed)."""

    def __init__(self, d, h, dk=None, dv=None, bias=True, gate=False, kv_heads=None):
        super().__init__()
        self.h, self.dk, self.dv = h, dk or d // h, dv or d // h
        H = kv_heads or h
        self.q_proj = tnn.Linear(d, h * self.dk, bias=bias)
        self.k_proj = tnn.Linear(d, H * self.dk, bias=bias)
        self.v_proj = tnn.Linear(d, H * self.dv, bias=bias)
        self.out_proj = tnn.Linear(h * self.dv, d, bias=bias)
        self.init_heads(h, gate)


# ---- cases ----

def case_rng(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def randomize(model, rng, fixed, init=None):
    """Random weights, not the defaults, so that every tensor moves the output: head_mask from
    U(0.5, 1.5), the rest from N(0, 0.5) in state_dict order, except the names in `init`
    (name -> shape -> values, or None to keep the tensor); then the `fixed` values."""
    init = init or {}
    with torch.no_grad():
        for key, t in model.state_dict().items():
            if key in init:
                if init[key] is not None:
                    t.copy_(torch.as_tensor(init[key](t.shape)))
            elif key == "head_mask":
                t.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, t.shape)))
            else:
                t.copy_(torch.from_numpy(rng.normal(0.0, 0.5, t.shape)))
        for key, values in fixed.items():
            model.state_dict()[key].copy_(torch.tensor(values))
    if hasattr(model, "head_mask"):
        model.head_mask.requires_grad_(True)  # Michel et al.'s head importance, a gradient like a parameter's


def padding_mask(b, m, pad):
    """(B, 1, 1, M) key padding: batch 0 pads its last key, batch 1 its last `pad` (M: every key,
    an empty batch element)."""
    mask = np.ones((b, 1, 1, m), dtype=bool)
    mask[0, ..., m - 1:] = False
    mask[1, ..., m - pad:] = False
    return mask


def query_mask(rng, b, n, m, keep=0.7, first_key=True):
    """(B, 1, N, M) query-dependent mask, each entry allowed with probability `keep`, key 0 always
    allowed when `first_key`; batch 1's query row 1 allows nothing."""
    mask = rng.random((b, 1, n, m)) < keep
    if first_key:
        mask[..., 0] = True
    mask[1, 0, 1, :] = False
    return mask


def leaf(rng, shape):
    """A standard normal input that requires grad."""
    return torch.from_numpy(rng.normal(size=shape)).requires_grad_(True)


def forward_case(name, model, rng, x_shape, m, mask_fn=None, mask_args=(), check=None):
    """Draws x (B, N, D), the context (B, M, D) when `m` is set (cross-attention; else c = x) and
    the mask mask_fn(rng, *mask_args), runs model(x, c, mask), lets check(out, att) assert what
    the case is about, backpropagates, and returns the case's tensors."""
    b, _, d = x_shape
    x = leaf(rng, x_shape)
    c = leaf(rng, (b, m, d)) if m else None
    mask_np = mask_fn(rng, *mask_args) if mask_fn else None
    mask = torch.from_numpy(mask_np) if mask_np is not None else None
    out, att = model(x, c if c is not None else x, mask)
    if check:
        check(out, att)
    return case_tensors(name, backward_record(model, rng, x, c, mask, out, att))


def backward_record(model, rng, x, c, mask, out, att, weights=None):
    """Backpropagates a random grad_output from the case's generator and returns the file's
    entries of the case (without the "CASE/" prefix); `weights` replaces the state dict when the
    forward updated buffers."""
    grad_output = torch.from_numpy(rng.normal(size=out.shape))
    (out * grad_output).sum().backward()
    rec = {"x": x, "grad_output": grad_output, "output": out, "grad.x": x.grad}
    if att is not None:
        rec["attention"] = att
    if c is not None:
        rec.update({"context": c, "grad.context": c.grad})
    if mask is not None:
        rec["mask"] = mask
    for key, t in (model.state_dict() if weights is None else weights).items():
        rec["w/" + key] = t
    params = list(model.named_parameters())
    if hasattr(model, "head_mask"):
        params.append(("head_mask", model.head_mask))
    for key, p in params:
        rec["grad." + key] = p.grad if p.grad is not None else torch.zeros_like(p)
    return rec


def case_tensors(name, rec):
    """The record as NumPy arrays named "CASE/key"; no entry may hold a NaN."""
    tensors = {}
    for key, t in rec.items():
        a = t.detach().numpy() if isinstance(t, torch.Tensor) else t
        assert a.dtype == np.bool_ or not np.isnan(a).any(), f"{name}/{key} has NaN"
        tensors[f"{name}/{key}"] = np.ascontiguousarray(a)
    return tensors


class GoldenFile:
    """Collects the cases of tests/reference/<kind>_golden.safetensors, written by
    tests/reference/<kind>_reference.py (`script`), and saves them."""

    def __init__(self, script, max_kib=150):
        base = os.path.basename(script)
        self.path = os.path.join(HERE, base.replace("_reference.py", "_golden.safetensors"))
        self.max_kib = max_kib
        self.tensors = {}
        self.metadata = {"generator": "tests/reference/%s (PyTorch %s)" % (base, torch.__version__)}
        self.cases = 0

    def add(self, name, spec, d_model, tensors, **metadata):
        """The case's tensors (already named "CASE/..."), its spec and d_model, and any further
        metadata entries ("CASE/<key>")."""
        self.tensors.update(tensors)
        for key, value in dict(spec=spec, d_model=str(d_model), **metadata).items():
            self.metadata[f"{name}/{key}"] = value
        self.cases += 1

    def save(self):
        out = self.path
        safetensors_lite.save(out, self.tensors, self.metadata)
        if os.path.getsize(out) > self.max_kib * 1024:  # committed to the repository: keep the cases small
            sys.exit(f"{out} is {os.path.getsize(out)} bytes; keep it under {self.max_kib} KiB")
        print(f"wrote {out}: {self.cases} cases, {len(self.tensors)} tensors, {os.path.getsize(out)} bytes")


def write_cases(script, cases, run_case, d_model, max_kib=150):
    """Writes the file of `cases` (name -> (spec, *args)), each case's tensors from
    run_case(name, *args)."""
    golden = GoldenFile(script, max_kib)
    for name, (spec, *args) in cases.items():
        golden.add(name, spec, d_model, run_case(name, *args))
    golden.save()
