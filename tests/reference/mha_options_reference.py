#!/usr/bin/python3
"""Golden outputs and gradients from PyTorch for the options of current models on attnlab's mha:
kv_heads, alibi, qk_norm, softcap, score=sigmoid|softpick, sinks, rope (docs/attention.md,
"Options of current models").

The module below is written from the formulas of that section alone, in this order inside a
head: projections, qk_norm (RMSNorm over dk, eps 1e-6, weights shared by the heads), RoPE
(rotate-half form, positions 0..N-1 for queries and 0..M-1 for keys), q.k / sqrt(dk), ALiBi
(-slope_i |n - m|), softcap (c tanh(s / c)), then the mask and the score function (softmax with
an optional sink logit in the denominator, sigmoid(s + b), or softpick). Grouped keys and values
are repeated to the query heads with repeat_interleave. Parameter and buffer names are attnlab's,
so the state dicts load strictly into `nn::make_attention(spec, d_model)`.
tests/attention/test_mha_options_golden.cpp reads the file this script writes:

    /usr/bin/python3 tests/reference/mha_options_reference.py   # rewrites mha_options_golden.safetensors

The file's layout is golden_common.py's. The layer is called in eval mode with causal=false
(causality comes from the spec). A query row with no allowed key gives zero probabilities and a
zero head output for every score function.

Packed sequences (docs/attention.md, "Packed sequences"): a case named packed_* also holds
"segment_ids" (B, N) int64; the module then allows key m for query n only when
ids[b, n] == ids[b, m] (besides causality and the mask), with positions (RoPE, ALiBi) still
0..N-1 along the row, and the test calls forward_packed with the ids.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_common as gc  # noqa: E402  (re-runs this script under /usr/bin/python3 if needed)
from golden_common import Heads, masked_softmax, split_heads  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as tnn  # noqa: E402


def slopes(h):
    """ALiBi slopes as in Press et al.'s code: 2^(-8(i+1)/h) for h a power of two, else the
    slopes of the largest power of two p below h, then every other slope of 2p heads."""
    def power_of_two(n):
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
    p = 2 ** int(math.floor(math.log2(h)))
    return power_of_two(p) if p == h else power_of_two(p) + power_of_two(2 * p)[0::2][: h - p]


def rms_norm(u, weight, eps=1e-6):
    return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(u, base):
    """Rotate-half RoPE of u (..., L, r) at positions 0..L-1."""
    r, length = u.shape[-1], u.shape[-2]
    theta = base ** (-torch.arange(0, r // 2, dtype=torch.float64) * 2.0 / r)   # (r/2)
    angle = torch.arange(length, dtype=torch.float64)[:, None] * theta[None, :]  # (L, r/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    u1, u2 = u[..., : r // 2], u[..., r // 2:]
    return torch.cat([u1 * cos - u2 * sin, u2 * cos + u1 * sin], -1)


class OptionsMHA(Heads):
    def __init__(self, d, h, kv_heads=None, dk=None, dv=None, bias=True, causal=False, gate=False, alibi=False,
                 qk_norm=False, softcap=0.0, score="softmax", sigmoid_bias=None, softpick_eps=1e-6, sinks=False,
                 rope=False, rope_base=10000.0):
        super().__init__()
        self.h, self.g = h, kv_heads or h
        self.dk, self.dv = dk or d // h, dv or d // h
        self.q_proj = tnn.Linear(d, h * self.dk, bias=bias)
        self.k_proj = tnn.Linear(d, self.g * self.dk, bias=bias)
        self.v_proj = tnn.Linear(d, self.g * self.dv, bias=bias)
        self.out_proj = tnn.Linear(h * self.dv, d, bias=bias)
        if qk_norm:
            self.q_norm = tnn.Module()
            self.q_norm.weight = tnn.Parameter(torch.ones(self.dk))
            self.k_norm = tnn.Module()
            self.k_norm.weight = tnn.Parameter(torch.ones(self.dk))
        if sinks:
            self.sinks = tnn.Parameter(torch.zeros(h))
        self.init_heads(h, gate)
        self.causal, self.alibi, self.qk_norm, self.softcap = causal, alibi, qk_norm, softcap
        self.score, self.sigmoid_bias, self.softpick_eps = score, sigmoid_bias, softpick_eps
        self.rope, self.rope_base = rope, rope_base
        self.segment_ids = None  # (B, N) int64 for packed sequences, or None

    def probabilities(self, s, allowed):
        """The score function of s (B, h, N, M) over the allowed entries (bool, broadcastable)."""
        allowed = allowed.expand_as(s)
        if self.score == "sigmoid":
            b = -math.log(s.shape[-1]) if self.sigmoid_bias is None else self.sigmoid_bias
            return torch.sigmoid(s + b) * allowed
        if self.score == "softpick":
            c = s.masked_fill(~allowed, float("-inf")).amax(-1, keepdim=True).clamp(min=0.0)  # (B, h, N, 1)
            e = torch.exp(s - c) - torch.exp(-c)
            num = torch.relu(e) * allowed
            return num / ((e.abs() * allowed).sum(-1, keepdim=True) + self.softpick_eps)
        if not hasattr(self, "sinks"):
            return masked_softmax(s, allowed)
        # P = exp(s) / (exp(sink) + sum over allowed exp(s)), computed with a shift
        sink = self.sinks.view(1, -1, 1, 1)                                       # (1, h, 1, 1)
        shift = torch.maximum(s.masked_fill(~allowed, float("-inf")).amax(-1, keepdim=True), sink).detach()
        num = torch.exp(s - shift) * allowed
        return num / (torch.exp(sink - shift) + num.sum(-1, keepdim=True))

    def forward(self, x, c, mask):
        n_len, m_len = x.shape[1], c.shape[1]
        q = split_heads(self.q_proj(x), self.h)   # (B, h, N, dk)
        k = split_heads(self.k_proj(c), self.g)   # (B, g, M, dk)
        v = split_heads(self.v_proj(c), self.g)   # (B, g, M, dv)
        if self.qk_norm:
            q, k = rms_norm(q, self.q_norm.weight), rms_norm(k, self.k_norm.weight)
        if self.rope:
            q, k = rope(q, self.rope_base), rope(k, self.rope_base)
        k = k.repeat_interleave(self.h // self.g, dim=1)  # (B, h, M, dk): head i reads kv head i // (h/g)
        v = v.repeat_interleave(self.h // self.g, dim=1)  # (B, h, M, dv)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.dk)  # (B, h, N, M)
        n = torch.arange(n_len)[:, None]
        m = torch.arange(m_len)[None, :]
        if self.alibi:
            s = s - torch.tensor(slopes(self.h)).view(1, -1, 1, 1) * (n - m).abs()
        if self.softcap:
            s = self.softcap * torch.tanh(s / self.softcap)
        allowed = torch.ones(n_len, m_len, dtype=torch.bool)
        if self.causal:
            allowed = allowed & (m <= n)
        if mask is not None:
            allowed = allowed & mask
        if self.segment_ids is not None:
            ids = self.segment_ids
            allowed = allowed & (ids[:, None, :, None] == ids[:, None, None, :])  # (B, 1, N, N)
        p = self.probabilities(s, allowed)
        return self.finish(p @ v), p


D, B = 8, 2


def query_mask(rng, n, m):
    return gc.query_mask(rng, B, n, m, keep=0.7, first_key=False)


def padding_mask(rng, n, m):
    return gc.padding_mask(B, m, pad=2)


ALL = dict(alibi=True, qk_norm=True, softcap=1.5, rope=True)
ALL_SPEC = "alibi=true, qk_norm=true, softcap=1.5, rope=true"

# name: (spec, module factory, N, M (None = self-attention), mask factory or None)
CASES = {
    "kv_heads_cross_mask": ("mha(heads=4, kv_heads=2)", lambda: OptionsMHA(D, 4, 2), 4, 5, query_mask),
    "alibi_causal_3_heads": ("mha(heads=3, key_size=2, value_size=3, alibi=true, causal=true)",
                             lambda: OptionsMHA(D, 3, dk=2, dv=3, alibi=True, causal=True), 5, None, None),
    "qk_norm_rope_mask": ("mha(heads=2, qk_norm=true, rope=true, rope_base=100)",
                          lambda: OptionsMHA(D, 2, qk_norm=True, rope=True, rope_base=100.0), 5, None, query_mask),
    "rope_causal_pad": ("mha(heads=2, key_size=6, rope=true, causal=true)",
                        lambda: OptionsMHA(D, 2, dk=6, rope=True, causal=True), 5, None, padding_mask),
    "softcap_mask": ("mha(heads=2, softcap=0.8)", lambda: OptionsMHA(D, 2, softcap=0.8), 4, 5, query_mask),
    "sigmoid_bias_mask": ("mha(heads=2, score=sigmoid, sigmoid_bias=0.3)",
                          lambda: OptionsMHA(D, 2, score="sigmoid", sigmoid_bias=0.3), 4, 5, query_mask),
    "softpick_mask": ("mha(heads=2, score=softpick)", lambda: OptionsMHA(D, 2, score="softpick"), 4, 5, query_mask),
    "softpick_causal_eps": ("mha(heads=2, score=softpick, softpick_eps=0.01, causal=true)",
                            lambda: OptionsMHA(D, 2, score="softpick", softpick_eps=0.01, causal=True), 5, None, None),
    "sinks_mask": ("mha(heads=2, sinks=true)", lambda: OptionsMHA(D, 2, sinks=True), 4, 5, query_mask),
    "all_softmax_causal_gate": ("mha(heads=4, kv_heads=2, %s, sinks=true, causal=true, gate=hard_concrete)" % ALL_SPEC,
                                lambda: OptionsMHA(D, 4, 2, sinks=True, causal=True, gate=True, **ALL), 5, None,
                                padding_mask),
    "all_softmax_cross_mask": ("mha(heads=4, kv_heads=1, %s, sinks=true)" % ALL_SPEC,
                               lambda: OptionsMHA(D, 4, 1, sinks=True, **ALL), 4, 6, query_mask),
    "all_sigmoid_causal": ("mha(heads=4, kv_heads=2, %s, score=sigmoid, causal=true)" % ALL_SPEC,
                           lambda: OptionsMHA(D, 4, 2, score="sigmoid", causal=True, **ALL), 5, None, None),
    "all_softpick_mask": ("mha(heads=4, kv_heads=2, %s, score=softpick, bias=false)" % ALL_SPEC,
                          lambda: OptionsMHA(D, 4, 2, score="softpick", bias=False, **ALL), 5, None, query_mask),
    "packed_all_softmax_causal_mask": ("mha(heads=2, kv_heads=1, %s, sinks=true, causal=true)" % ALL_SPEC,
                                       lambda: OptionsMHA(D, 2, 1, sinks=True, causal=True, **ALL), 6, None,
                                       query_mask),
}

# packed_* cases: row 0 holds three documents, row 1 two.
SEGMENT_IDS = np.array([[0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 1, 1]], dtype=np.int64)


def run_case(name, factory, n, m, mask_fn):
    rng = gc.case_rng(name)
    torch.manual_seed(0)
    model = factory().eval()
    gc.randomize(model, rng, {})

    def check(out, att):
        if mask_fn is query_mask:  # batch 1's query row 1 allows nothing: zero probabilities
            assert torch.equal(att[1, :, 1], torch.zeros_like(att[1, :, 1]))

    if not name.startswith("packed_"):
        return gc.forward_case(name, model, rng, (B, n, D), m, mask_fn, (n, m or n), check)
    model.segment_ids = torch.from_numpy(SEGMENT_IDS)
    tensors = gc.forward_case(name, model, rng, (B, n, D), m, mask_fn, (n, m or n), check)
    tensors[name + "/segment_ids"] = SEGMENT_IDS
    return tensors


def main():
    gc.write_cases(__file__, CASES, run_case, D)


if __name__ == "__main__":
    main()
