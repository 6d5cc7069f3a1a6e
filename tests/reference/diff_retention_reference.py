#!/usr/bin/python3
"""Golden outputs and gradients from PyTorch for attnlab's `diff` (differential attention, Ye et al.
2024) and `retention` (multi-scale retention, Sun et al. 2023).

The modules below are written from the formulas of docs/attention.md ("diff", "retention") alone,
with attnlab's parameter and buffer names and shapes, so their state dicts load strictly into
`nn::make_attention(spec, d_model)`. tests/attention/test_diff.cpp and test_retention.cpp read the
file this script writes:

    /usr/bin/python3 tests/reference/diff_retention_reference.py   # rewrites diff_retention_golden.safetensors

The layout is golden_common.py's. Each layer is called in eval mode with need_weights; the C++
side also runs it without (the fused kernel for diff, the chunked form for retention) against the
same numbers. Retention is written here in its parallel form straight from the sum
O[n] = sum_{m <= n} gamma^(n-m) (q[n].k[m]/sqrt(dk)) v[m]; no chunking, no recurrence.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_common as gc  # noqa: E402  (re-runs this script under /usr/bin/python3 if needed)
from golden_common import Heads, masked_softmax, merge_heads, split_heads  # noqa: E402
from attention_reference import allowed_mask  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as tnn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ---- diff ----

class RMSNorm(tnn.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last dim (PyTorch 1.13 has no nn.RMSNorm)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = tnn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Diff(Heads):
    def __init__(self, d, h, dk=None, dv=None, layer=1, bias=True, causal=False, gate=False):
        super().__init__()
        self.h, self.dk, self.dv = h, dk or d // (2 * h), dv or d // h
        self.causal = causal
        self.lambda_init = 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))
        self.q_proj = tnn.Linear(d, h * 2 * self.dk, bias=bias)
        self.k_proj = tnn.Linear(d, h * 2 * self.dk, bias=bias)
        self.v_proj = tnn.Linear(d, h * self.dv, bias=bias)
        self.out_proj = tnn.Linear(h * self.dv, d, bias=bias)
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            setattr(self, name, tnn.Parameter(torch.randn(self.dk) * 0.1))
        self.subln = RMSNorm(self.dv, 1e-5)
        self.init_heads(h, gate)

    def forward(self, x, c, mask):
        b, n, m = x.shape[0], x.shape[1], c.shape[1]
        # head i owns columns [2i dk, (2i+2) dk): its first half, then its second
        q = self.q_proj(x).view(b, n, self.h, 2, self.dk).permute(3, 0, 2, 1, 4)  # (2, B, h, N, dk)
        k = self.k_proj(c).view(b, m, self.h, 2, self.dk).permute(3, 0, 2, 1, 4)  # (2, B, h, M, dk)
        v = split_heads(self.v_proj(c), self.h)  # (B, h, M, dv)
        allowed = allowed_mask(mask, n, m, self.causal)
        p1 = masked_softmax(q[0] @ k[0].transpose(-2, -1) / math.sqrt(self.dk), allowed)
        p2 = masked_softmax(q[1] @ k[1].transpose(-2, -1) / math.sqrt(self.dk), allowed)
        lam = (torch.exp(torch.dot(self.lambda_q1, self.lambda_k1)) - torch.exp(torch.dot(self.lambda_q2, self.lambda_k2))
               + self.lambda_init)
        p = p1 - lam * p2  # (B, h, N, M)
        o = self.subln(p @ v) * (1 - self.lambda_init)  # (B, h, N, dv)
        return self.finish(o), p


# ---- retention ----

class Retention(Heads):
    def __init__(self, d, h, dk=None, dv=None, decay=None, bias=True, gate=False):
        super().__init__()
        self.h, self.dk, self.dv = h, dk or d // h, dv or d // h
        if decay is None:
            decay = [1 - 2.0 ** (-5 - i) for i in range(h)]
        elif len(decay) == 1:
            decay = decay * h
        self.gamma = torch.tensor(decay)  # (h)
        self.q_proj = tnn.Linear(d, h * self.dk, bias=bias)
        self.k_proj = tnn.Linear(d, h * self.dk, bias=bias)
        self.v_proj = tnn.Linear(d, h * self.dv, bias=bias)
        self.g_proj = tnn.Linear(d, h * self.dv, bias=bias)
        self.out_proj = tnn.Linear(h * self.dv, d, bias=bias)
        self.init_heads(h, gate)

    def forward(self, x, c, mask):
        assert c is x, "retention is self-attention only"
        n = x.shape[1]
        q, k, v = (split_heads(p(x), self.h) for p in (self.q_proj, self.k_proj, self.v_proj))
        dist = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # n - m
        decay = torch.where(dist >= 0, self.gamma[:, None, None] ** dist.clamp(min=0), torch.zeros(()))  # (h, N, N)
        a = q @ k.transpose(-2, -1) / math.sqrt(self.dk) * decay  # (B, h, N, N)
        if mask is not None:
            a = a * mask  # key mask (B, 1, 1, N): masked keys contribute nothing
        o = F.layer_norm(a @ v, (self.dv,), eps=1e-5)  # (B, h, N, dv), no affine
        o = o * self.head_scale()
        return self.out_proj(F.silu(self.g_proj(x)) * merge_heads(o)), a


# ---- cases ----

D, B = 8, 2


def query_mask(rng, n, m):
    return gc.query_mask(rng, B, n, m)


def key_mask(rng, n, m):
    """(B, 1, 1, N): batch 0 drops its last key, batch 1 keys 0 and 3 (so its query row 0 sees nothing)."""
    mask = np.ones((B, 1, 1, m), dtype=bool)
    mask[0, ..., m - 1] = False
    mask[1, ..., [0, 3]] = False
    return mask


# name: (spec, module factory, N, M (None = self-attention), mask factory or None, fixed tensors)
CASES = {
    "diff_self_layer3": ("diff(heads=2, layer=3)", lambda: Diff(D, 2, layer=3), 5, None, None, {}),
    "diff_causal_gate": ("diff(heads=2, key_size=3, value_size=3, causal=true, gate=hard_concrete)",
                         lambda: Diff(D, 2, dk=3, dv=3, causal=True, gate=True), 6, None, None,
                         {"gate.log_alpha": [-0.5, 3.0], "head_mask": [1.0, 0.7]}),
    "diff_cross_mask": ("diff(heads=2, bias=false, layer=2)", lambda: Diff(D, 2, layer=2, bias=False), 4, 5,
                        query_mask, {}),
    "retention_default_decay": ("retention(heads=2, chunk=2)", lambda: Retention(D, 2), 5, None, None, {}),
    "retention_decay_mask_gate": ("retention(heads=2, key_size=3, value_size=2, decay=0.7, chunk=3, gate=hard_concrete)",
                                  lambda: Retention(D, 2, dk=3, dv=2, decay=[0.7], gate=True), 7, None, key_mask,
                                  {"gate.log_alpha": [0.4, -3.0]}),
    "retention_per_head_no_bias": ("retention(heads=4, decay=0.5+0.8+0.9+0.97, chunk=4, bias=false)",
                                   lambda: Retention(D, 4, decay=[0.5, 0.8, 0.9, 0.97], bias=False), 6, None,
                                   None, {}),
}


def run_case(name, factory, n, m, mask_fn, fixed):
    rng = gc.case_rng(name)
    torch.manual_seed(0)
    model = factory().eval()
    gc.randomize(model, rng, fixed)

    def check(out, att):
        if mask_fn is query_mask:  # the empty row: zero head outputs leave out_proj alone
            assert torch.equal(att[1, :, 1], torch.zeros_like(att[1, :, 1]))
        if mask_fn is key_mask:  # batch 1's row 0 has no key: zero retention, out_proj.bias only
            assert torch.allclose(out[1, 0], model.out_proj.bias, rtol=0, atol=1e-15)

    return gc.forward_case(name, model, rng, (B, n, D), m, mask_fn, (n, m or n), check)


def main():
    gc.write_cases(__file__, CASES, run_case, D)


if __name__ == "__main__":
    main()
