#!/usr/bin/python3
"""Golden outputs and gradients from PyTorch for attnlab's positional sparse patterns.

local, sparse_strided, sparse_fixed and dilated (ATTENTION_SPEC.md section 2) are written here
the plain way: MHA projections, the dense (N, M) score matrix, the spec's allowed-rule as a
boolean mask (with causal and the user's mask), a masked softmax, P V, head gates / head_mask,
out_proj. The parameter and buffer names are attnlab's (q_proj, k_proj, v_proj, out_proj,
gate.log_alpha, head_mask), so the state dicts load strictly into
`nn::make_attention(spec, d_model)`. tests/efficient/test_patterns_golden.cpp reads the file this
script writes:

    /usr/bin/python3 tests/reference/patterns_reference.py   # rewrites patterns_golden.safetensors

Layout (float64), per case CASE: CASE/w/<name> weights and buffers, CASE/x, CASE/context
(cross-attention only), CASE/mask (when the case has one), CASE/grad_output, CASE/output,
CASE/attention (densified probabilities), CASE/grad.x, CASE/grad.context, CASE/grad.<param>,
CASE/grad.head_mask (gradients of sum(output * grad_output)); metadata CASE/spec, CASE/d_model.
The layer runs in eval mode with causal=false at the call (causality comes from the spec).
Each case draws from its own generator seeded by its name.

A query row with no allowed key gives zero probabilities and a zero head output (spec
section 0); masked_softmax() defines that row, since PyTorch's softmax of an all -inf row is NaN.
"""
import math
import os
import sys
import zlib

try:
    import numpy as np
    import torch
    import torch.nn as tnn
except ImportError:
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3", os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit("patterns_reference.py needs NumPy and PyTorch: apt-get install python3-numpy python3-torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_lite  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "patterns_golden.safetensors")
torch.set_default_dtype(torch.float64)


# ---- the spec's rules (section 2), on raw indices n < N, m < M ----

def local_rule(w):
    return lambda n, m: (n - m).abs() <= w


def strided_rule(l):
    return lambda n, m: ((n - m).abs() < l) | ((n - m) % l == 0)


def fixed_rule(l, c):
    return lambda n, m: (n // l == m // l) | (m % l >= l - c)


def dilated_rule(w, d):
    return lambda n, m: ((n - m).abs() <= w * d) & ((n - m) % d == 0)


def masked_softmax(s, allowed):
    allowed = allowed.expand_as(s)
    row_any = allowed.any(-1, keepdim=True)
    s = s.masked_fill(~allowed, float("-inf"))
    s = torch.where(row_any, s, torch.zeros_like(s))  # keeps the empty rows finite
    return torch.softmax(s, -1) * allowed


class Gate(tnn.Module):
    """Hard Concrete gate, eval mode: g = clamp(sigmoid(log_alpha) (zeta - gamma) + gamma, 0, 1)."""

    def __init__(self, h, gamma=-0.1, zeta=1.1):
        super().__init__()
        self.log_alpha = tnn.Parameter(torch.full((h,), 2.0))
        self.gamma, self.zeta = gamma, zeta

    def forward(self):
        return torch.clamp(torch.sigmoid(self.log_alpha) * (self.zeta - self.gamma) + self.gamma, 0.0, 1.0)


class PatternMHA(tnn.Module):
    def __init__(self, d, h, rule, dk=None, dv=None, bias=True, causal=False, gate=False):
        super().__init__()
        self.h, self.dk, self.dv = h, dk or d // h, dv or d // h
        self.rule, self.causal = rule, causal
        self.q_proj = tnn.Linear(d, h * self.dk, bias=bias)
        self.k_proj = tnn.Linear(d, h * self.dk, bias=bias)
        self.v_proj = tnn.Linear(d, h * self.dv, bias=bias)
        self.out_proj = tnn.Linear(h * self.dv, d, bias=bias)
        if gate:
            self.gate = Gate(h)
        self.register_buffer("head_mask", torch.ones(h))

    def forward(self, x, c, mask):
        b, n_len, _ = x.shape
        m_len = c.shape[1]
        q = self.q_proj(x).view(b, n_len, self.h, self.dk).transpose(1, 2)  # (B, h, N, dk)
        k = self.k_proj(c).view(b, m_len, self.h, self.dk).transpose(1, 2)  # (B, h, M, dk)
        v = self.v_proj(c).view(b, m_len, self.h, self.dv).transpose(1, 2)  # (B, h, M, dv)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.dk)                    # (B, h, N, M)
        n = torch.arange(n_len)[:, None]
        m = torch.arange(m_len)[None, :]
        allowed = self.rule(n, m)                                           # (N, M)
        if self.causal:
            allowed = allowed & (m <= n)
        if mask is not None:
            allowed = allowed & mask
        p = masked_softmax(s, allowed)
        g = self.gate() * self.head_mask if hasattr(self, "gate") else self.head_mask
        o = (p @ v) * g.view(1, -1, 1, 1)                                   # (B, h, N, dv)
        return self.out_proj(o.transpose(1, 2).reshape(b, n_len, self.h * self.dv)), p


D, B = 8, 2


def key_mask(rng, n, m):
    """(B, 1, N, M) query-dependent mask; batch 1, query row 1 allows nothing."""
    mask = rng.random((B, 1, n, m)) < 0.8
    mask[1, 0, 1, :] = False
    return mask


def padding_mask(rng, n, m):
    """(B, 1, 1, M) key padding: batch 0 pads its last key, batch 1 its last two."""
    mask = np.ones((B, 1, 1, m), dtype=bool)
    mask[0, ..., m - 1:] = False
    mask[1, ..., m - 2:] = False
    return mask


# name: (spec, module factory, N, M (None = self-attention), mask factory or None, fixed tensors)
CASES = {
    "local_cross_mask": ("local(heads=2, window=2, key_size=3, value_size=5)",
                         lambda: PatternMHA(D, 2, local_rule(2), dk=3, dv=5), 7, 9, key_mask, {}),
    "local_causal_gate": ("local(heads=4, window=3, causal=true, gate=hard_concrete)",
                          lambda: PatternMHA(D, 4, local_rule(3), causal=True, gate=True), 8, None, None,
                          {"gate.log_alpha": [-0.5, 0.3, 3.0, 1.2], "head_mask": [1.0, 0.0, 1.0, 1.0]}),
    "strided_causal_pad": ("sparse_strided(heads=2, stride=3)",
                           lambda: PatternMHA(D, 2, strided_rule(3), causal=True), 10, None, padding_mask, {}),
    "strided_cross": ("sparse_strided(heads=2, stride=2, causal=false)",
                      lambda: PatternMHA(D, 2, strided_rule(2)), 7, 10, key_mask, {}),
    "fixed_causal_gate": ("sparse_fixed(heads=2, block=4, summary=1, gate=hard_concrete)",
                          lambda: PatternMHA(D, 2, fixed_rule(4, 1), causal=True, gate=True), 10, None, None,
                          {"gate.log_alpha": [-3.0, 0.7]}),
    "fixed_cross_no_bias": ("sparse_fixed(heads=2, block=3, summary=2, causal=false, bias=false)",
                            lambda: PatternMHA(D, 2, fixed_rule(3, 2), bias=False), 7, 10, key_mask, {}),
    "dilated_mask": ("dilated(heads=2, window=2, dilation=3)",
                     lambda: PatternMHA(D, 2, dilated_rule(2, 3)), 11, None, key_mask, {}),
    "dilated_causal_pad": ("dilated(heads=2, window=1, dilation=2, causal=true)",
                           lambda: PatternMHA(D, 2, dilated_rule(1, 2), causal=True), 9, None, padding_mask, {}),
}


def run_case(name, spec, factory, n, m, mask_fn, fixed):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    torch.manual_seed(0)
    model = factory().eval()
    with torch.no_grad():  # random weights, not the defaults, so that every tensor moves the output
        for key, t in model.state_dict().items():
            if key == "head_mask":
                t.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, t.shape)))
            else:
                t.copy_(torch.from_numpy(rng.normal(0.0, 0.5, t.shape)))
        for key, values in fixed.items():
            model.state_dict()[key].copy_(torch.tensor(values))
    model.head_mask.requires_grad_(True)
    x = torch.from_numpy(rng.normal(size=(B, n, D))).requires_grad_(True)
    c = torch.from_numpy(rng.normal(size=(B, m, D))).requires_grad_(True) if m else None
    mask_np = mask_fn(rng, n, m or n) if mask_fn else None
    mask = torch.from_numpy(mask_np) if mask_np is not None else None
    out, att = model(x, c if c is not None else x, mask)
    if mask_fn is key_mask:  # the empty row: zero head outputs leave out_proj.bias (or 0) alone
        assert torch.equal(att[1, :, 1], torch.zeros_like(att[1, :, 1]))
    grad_output = torch.from_numpy(rng.normal(size=out.shape))
    (out * grad_output).sum().backward()
    record = {"x": x, "grad_output": grad_output, "output": out, "attention": att, "grad.x": x.grad}
    if c is not None:
        record.update({"context": c, "grad.context": c.grad})
    if mask is not None:
        record["mask"] = mask
    for key, t in model.state_dict().items():
        record["w/" + key] = t
    for key, p in list(model.named_parameters()) + [("head_mask", model.head_mask)]:
        record["grad." + key] = p.grad if p.grad is not None else torch.zeros_like(p)
    tensors = {}
    for key, t in record.items():
        a = t.detach().numpy() if isinstance(t, torch.Tensor) else t
        assert a.dtype == np.bool_ or not np.isnan(a).any(), f"{name}/{key} has NaN"
        tensors[f"{name}/{key}"] = np.ascontiguousarray(a)
    return tensors


def main():
    tensors, metadata = {}, {}
    for name, (spec, factory, n, m, mask_fn, fixed) in CASES.items():
        tensors.update(run_case(name, spec, factory, n, m, mask_fn, fixed))
        metadata[f"{name}/spec"] = spec
        metadata[f"{name}/d_model"] = str(D)
    metadata["generator"] = "tests/reference/patterns_reference.py (PyTorch %s)" % torch.__version__
    safetensors_lite.save(OUT, tensors, metadata)
    if os.path.getsize(OUT) > 150 * 1024:  # committed to the repository: keep the cases small
        sys.exit(f"{OUT} is {os.path.getsize(OUT)} bytes; keep it under 150 KiB")
    print(f"wrote {OUT}: {len(CASES)} cases, {len(tensors)} tensors, {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
