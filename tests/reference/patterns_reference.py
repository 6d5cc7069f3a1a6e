#!/usr/bin/python3
"""Golden outputs and gradients from PyTorch for attnlab's positional sparse patterns.

local (with sink tokens), sparse_strided, sparse_fixed and dilated (docs/attention.md) are written
here the plain way: MHA projections, the dense (N, M) score matrix, the documented allowed-rule as a
boolean mask (with causal and the user's mask), a masked softmax, P V, head gates / head_mask,
out_proj. The parameter and buffer names are attnlab's (q_proj, k_proj, v_proj, out_proj,
gate.log_alpha, head_mask), so the state dicts load strictly into
`nn::make_attention(spec, d_model)`. tests/efficient/test_patterns_golden.cpp reads the file this
script writes:

    /usr/bin/python3 tests/reference/patterns_reference.py   # rewrites patterns_golden.safetensors

The file's layout is golden_common.py's, CASE/attention being the densified probabilities.
The layer runs in eval mode with causal=false at the call (causality comes from the spec).

A query row with no allowed key gives zero probabilities and a zero head output
(docs/attention.md, conventions); golden_common.masked_softmax() defines that row.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_common as gc  # noqa: E402  (re-runs this script under /usr/bin/python3 if needed)
from golden_common import Projected, masked_softmax, split_heads  # noqa: E402
import torch  # noqa: E402


# ---- the allowed rules of docs/attention.md, on raw indices n < N, m < M ----

def local_rule(w, sinks=0):
    """The window |n - m| <= w, plus the sink keys m < sinks (StreamingLLM) for every query."""
    return lambda n, m: ((n - m).abs() <= w) | (m < sinks)


def strided_rule(l):
    return lambda n, m: ((n - m).abs() < l) | ((n - m) % l == 0)


def fixed_rule(l, c):
    return lambda n, m: (n // l == m // l) | (m % l >= l - c)


def dilated_rule(w, d):
    return lambda n, m: ((n - m).abs() <= w * d) & ((n - m) % d == 0)


class PatternMHA(Projected):
    def __init__(self, d, h, rule, dk=None, dv=None, bias=True, causal=False, gate=False):
        super().__init__(d, h, dk, dv, bias, gate)
        self.rule, self.causal = rule, causal

    def forward(self, x, c, mask):
        n_len, m_len = x.shape[1], c.shape[1]
        q = split_heads(self.q_proj(x), self.h)             # (B, h, N, dk)
        k = split_heads(self.k_proj(c), self.h)             # (B, h, M, dk)
        v = split_heads(self.v_proj(c), self.h)             # (B, h, M, dv)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.dk)    # (B, h, N, M)
        n = torch.arange(n_len)[:, None]
        m = torch.arange(m_len)[None, :]
        allowed = self.rule(n, m)                           # (N, M)
        if self.causal:
            allowed = allowed & (m <= n)
        if mask is not None:
            allowed = allowed & mask
        p = masked_softmax(s, allowed)
        return self.finish(p @ v), p


D, B = 8, 2


def key_mask(rng, n, m):
    return gc.query_mask(rng, B, n, m, keep=0.8, first_key=False)


def padding_mask(rng, n, m):
    return gc.padding_mask(B, m, pad=2)


# name: (spec, module factory, N, M (None = self-attention), mask factory or None, fixed tensors)
CASES = {
    "local_cross_mask": ("local(heads=2, window=2, key_size=3, value_size=5)",
                         lambda: PatternMHA(D, 2, local_rule(2), dk=3, dv=5), 7, 9, key_mask, {}),
    "local_causal_gate": ("local(heads=4, window=3, causal=true, gate=hard_concrete)",
                          lambda: PatternMHA(D, 4, local_rule(3), causal=True, gate=True), 8, None, None,
                          {"gate.log_alpha": [-0.5, 0.3, 3.0, 1.2], "head_mask": [1.0, 0.0, 1.0, 1.0]}),
    "local_sinks_causal_pad": ("local(heads=2, window=2, sink_tokens=2, causal=true)",
                               lambda: PatternMHA(D, 2, local_rule(2, sinks=2), causal=True), 9, None,
                               padding_mask, {}),
    "local_sinks_cross_mask": ("local(heads=2, window=1, sink_tokens=3, key_size=3, value_size=5)",
                               lambda: PatternMHA(D, 2, local_rule(1, sinks=3), dk=3, dv=5), 8, 6, key_mask, {}),
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


def run_case(name, factory, n, m, mask_fn, fixed):
    rng = gc.case_rng(name)
    torch.manual_seed(0)
    model = factory().eval()
    gc.randomize(model, rng, fixed)

    def check(out, att):
        if mask_fn is key_mask:  # the empty row: zero probabilities
            assert torch.equal(att[1, :, 1], torch.zeros_like(att[1, :, 1]))

    return gc.forward_case(name, model, rng, (B, n, D), m, mask_fn, (n, m or n), check)


def main():
    gc.write_cases(__file__, CASES, run_case, D)


if __name__ == "__main__":
    main()
