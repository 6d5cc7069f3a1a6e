#!/usr/bin/python3
"""Golden outputs and gradients from PyTorch for attnlab's `mla` (multi-head latent attention,
DeepSeek-V2).

The module below is written from the formulas of docs/attention.md ("mla") alone, with exactly
attnlab's parameter and buffer names and shapes, so its state dict loads strictly into
`nn::make_attention(spec, d_model)`:

    [c, kr] = x_c kv_down^T split (r, dr);  c = RMSNorm(c);  kr = RoPE(kr)
    [k_nope_i, v_i] = (c kv_up^T) viewed per head as (dk, dv)
    qx = x or RMSNorm(x q_down^T);  [q_nope_i, q_rope_i] = (qx q_up^T) viewed per head as (dk, dr)
    Score_i = (q_nope_i . k_nope_i + RoPE(q_rope_i) . kr) / sqrt(dk + dr)

RoPE is the rotate-half form written out pair by pair; RMSNorm has eps 1e-6. No biases.
tests/attention/test_mla.cpp reads the file this script writes:

    /usr/bin/python3 tests/reference/mla_reference.py   # rewrites mla_golden.safetensors

The layout is golden_common.py's. The layer is called in eval mode with causal=false (causality
comes from the spec) and need_weights.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_common as gc  # noqa: E402  (re-runs this script under /usr/bin/python3 if needed)
from golden_common import Heads, masked_softmax  # noqa: E402
import torch  # noqa: E402
import torch.nn as tnn  # noqa: E402

B, D = 2, 8


class RMSNorm(tnn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = tnn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(u):
    """u (..., P, dr) at positions 0..P-1: for j < dr/2, theta_j = 10000^(-2j/dr),
    u'[j] = u[j] cos(p theta_j) - u[j + dr/2] sin(p theta_j),
    u'[j + dr/2] = u[j + dr/2] cos(p theta_j) + u[j] sin(p theta_j)."""
    p, dr = u.shape[-2], u.shape[-1]
    half = dr // 2
    theta = torch.tensor([10000.0 ** (-2.0 * j / dr) for j in range(half)])
    angle = torch.arange(p, dtype=torch.float64)[:, None] * theta[None, :]  # (P, dr/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    a, b = u[..., :half], u[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


class MLA(Heads):
    def __init__(self, d, h, r, dk, dr, dv, rq=0, causal=False, gate=False):
        super().__init__()
        self.h, self.r, self.dk, self.dr, self.dv = h, r, dk, dr, dv
        self.causal = causal
        if rq == 0:
            self.q_proj = tnn.Linear(d, h * (dk + dr), bias=False)
        else:
            self.q_down = tnn.Linear(d, rq, bias=False)
            self.q_norm = RMSNorm(rq)
            self.q_up = tnn.Linear(rq, h * (dk + dr), bias=False)
        self.kv_down = tnn.Linear(d, r + dr, bias=False)
        self.kv_norm = RMSNorm(r)
        self.kv_up = tnn.Linear(r, h * (dk + dv), bias=False)
        self.out_proj = tnn.Linear(h * dv, d, bias=False)
        self.init_heads(h, gate)

    def forward(self, x, c, mask):
        b, n, _ = x.shape
        m = c.shape[1]
        h, dk, dr, dv = self.h, self.dk, self.dr, self.dv
        if hasattr(self, "q_proj"):
            q = self.q_proj(x)
        else:
            q = self.q_up(self.q_norm(self.q_down(x)))
        q = q.view(b, n, h, dk + dr).transpose(1, 2)  # (B, h, N, dk+dr): head i's first dk, then dr
        q_nope, q_rope = q[..., :dk], rope(q[..., dk:])
        ckr = self.kv_down(c)  # (B, M, r + dr)
        lat, kr = self.kv_norm(ckr[..., :self.r]), rope(ckr[..., self.r:])  # (B, M, r), (B, M, dr)
        kv = self.kv_up(lat).view(b, m, h, dk + dv).transpose(1, 2)  # (B, h, M, dk+dv)
        k_nope, v = kv[..., :dk], kv[..., dk:]
        s = (q_nope @ k_nope.transpose(-2, -1) + q_rope @ kr.unsqueeze(1).transpose(-2, -1)) / math.sqrt(dk + dr)
        allowed = mask
        if self.causal:
            tri = torch.ones(n, m, dtype=torch.bool).tril()
            allowed = tri if allowed is None else allowed & tri
        p = masked_softmax(s, allowed)  # (B, h, N, M)
        return self.finish(p @ v), p


def query_mask(rng, n, m):
    return gc.query_mask(rng, B, n, m)


def padding_mask(rng, n, m):
    return gc.padding_mask(B, m, 2)


# name -> (spec, factory, N, M (None: self-attention), mask, fixed weights)
CASES = {
    "mla_self": ("mla(heads=2, kv_rank=4, key_size=4, rope_size=2, value_size=3)",
                 lambda: MLA(D, 2, 4, 4, 2, 3), 5, None, None, {}),
    "mla_causal_gate": ("mla(heads=2, kv_rank=3, key_size=2, rope_size=4, value_size=4, causal=true, "
                        "gate=hard_concrete)",
                        lambda: MLA(D, 2, 3, 2, 4, 4, causal=True, gate=True), 6, None, None,
                        # head 0 gated to exactly 0 (clamped), head 1 inside (0, 1)
                        {"gate.log_alpha": [-3.0, 0.7]}),
    "mla_masked": ("mla(heads=4, kv_rank=5, key_size=2, rope_size=2, value_size=2)",
                   lambda: MLA(D, 4, 5, 2, 2, 2), 5, None, query_mask, {}),
    "mla_q_rank": ("mla(heads=2, kv_rank=4, q_rank=3, key_size=3, rope_size=2, value_size=3)",
                   lambda: MLA(D, 2, 4, 3, 2, 3, rq=3), 5, None, padding_mask, {}),
    "mla_cross": ("mla(heads=2, kv_rank=6, q_rank=4)",  # dk = dv = D/h = 4, dr = dk/2 = 2
                  lambda: MLA(D, 2, 6, 4, 2, 4, rq=4), 4, 6, padding_mask, {}),
}


def run_case(name, factory, n, m, mask_fn, fixed):
    rng = gc.case_rng(name)
    torch.manual_seed(0)
    model = factory().eval()
    gc.randomize(model, rng, fixed)

    def check(out, att):
        assert not torch.isnan(out).any()
        if mask_fn is query_mask:  # batch 1's query row 1 allows nothing: a zero attention row
            assert torch.equal(att[1, :, 1], torch.zeros_like(att[1, :, 1]))

    return gc.forward_case(name, model, rng, (B, n, D), m, mask_fn, (n, m or n), check)


def main():
    gc.write_cases(__file__, CASES, run_case, D)


if __name__ == "__main__":
    main()
