#!/usr/bin/python3
"""Golden outputs and gradients from PyTorch for attnlab's multi-head attention variants.

The modules below are written from docs/attention.md ("mha" to "collaborative", "Head gates") alone
(mha, talking_heads, collaborative, synthesizer, Hard Concrete gates in eval mode, head_mask), with
exactly attnlab's parameter and buffer names and shapes, so their state dicts load strictly into
`nn::make_attention(spec, d_model)`. tests/attention/test_attention_golden.cpp reads the file
this script writes:

    /usr/bin/python3 tests/reference/attention_reference.py   # rewrites attention_golden.safetensors

The file's layout is golden_common.py's (with metadata "CASE/spec" and "CASE/d_model"). The
layer is called in eval mode with causal=false (causality comes from the spec) and need_weights.

A query row with no allowed key gives zero probabilities and a zero head output (spec section
0); golden_common.masked_softmax() defines that row.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_common as gc  # noqa: E402  (re-runs this script under /usr/bin/python3 if needed)
from golden_common import Heads, masked_softmax, split_heads  # noqa: E402
import torch  # noqa: E402
import torch.nn as tnn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ---- docs/attention.md: conventions ----

def allowed_mask(mask, n, m, causal):
    allowed = mask
    if causal:
        tri = torch.ones(n, m, dtype=torch.bool).tril()  # m <= n
        allowed = tri if allowed is None else allowed & tri
    return allowed


# ---- 1.1 mha ----

class MHA(Heads):
    def __init__(self, d, h, dk=None, dv=None, bias=True, key_bias=None, causal=False, gate=False):
        super().__init__()
        self.h, self.dk, self.dv = h, dk or d // h, dv or d // h
        self.causal = causal
        key_bias = bias if key_bias is None else key_bias
        self.q_proj = tnn.Linear(d, h * self.dk, bias=bias)
        self.k_proj = tnn.Linear(d, h * self.dk, bias=key_bias)
        self.v_proj = tnn.Linear(d, h * self.dv, bias=bias)
        self.out_proj = tnn.Linear(h * self.dv, d, bias=bias)
        self.init_heads(h, gate)

    def forward(self, x, c, mask):
        n, m = x.shape[1], c.shape[1]
        q, k, v = split_heads(self.q_proj(x), self.h), split_heads(self.k_proj(c), self.h), split_heads(self.v_proj(c), self.h)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.dk)  # (B, h, N, M)
        p = masked_softmax(s, allowed_mask(mask, n, m, self.causal))
        return self.finish(p @ v), p


# ---- 1.2 talking_heads ----

class TalkingHeads(Heads):
    def __init__(self, d, h, hk=None, hv=None, pre=True, post=True, causal=False):
        super().__init__()
        self.h, self.hk, self.hv = h, hk or h, hv or h
        self.dk = self.dv = d // h  # both default to D/h with h the softmax heads
        self.causal = causal
        self.q_proj = tnn.Linear(d, self.hk * self.dk)
        self.k_proj = tnn.Linear(d, self.hk * self.dk)
        self.v_proj = tnn.Linear(d, self.hv * self.dv)
        self.out_proj = tnn.Linear(self.hv * self.dv, d)
        self.pre_mix = tnn.Parameter(torch.eye(self.hk, h)) if pre else None
        self.post_mix = tnn.Parameter(torch.eye(h, self.hv)) if post else None
        self.init_heads(self.hv, False)

    def forward(self, x, c, mask):
        n, m = x.shape[1], c.shape[1]
        q, k = split_heads(self.q_proj(x), self.hk), split_heads(self.k_proj(c), self.hk)
        v = split_heads(self.v_proj(c), self.hv)
        J = q @ k.transpose(-2, -1) / math.sqrt(self.dk)  # (B, hk, N, M)
        L = torch.einsum("banm,aj->bjnm", J, self.pre_mix) if self.pre_mix is not None else J  # (B, h, N, M)
        W = masked_softmax(L, allowed_mask(mask, n, m, self.causal))
        U = torch.einsum("bjnm,jv->bvnm", W, self.post_mix) if self.post_mix is not None else W  # (B, hv, N, M)
        return self.finish(U @ v), W


# ---- 1.3 collaborative ----

class Collaborative(Heads):
    def __init__(self, d, h, dks=None, dv=None, causal=False, gate=False):
        super().__init__()
        self.h, self.dks, self.dv = h, dks or d, dv or d // h
        self.scale = 1.0 / math.sqrt(self.dks / h)
        self.causal = causal
        self.q_shared = tnn.Linear(d, self.dks, bias=False)
        self.k_shared = tnn.Linear(d, self.dks, bias=False)
        self.mixing = tnn.Parameter(torch.randn(h, self.dks) * 0.2)
        self.content_bias = tnn.Linear(d, h, bias=False)
        self.v_proj = tnn.Linear(d, h * self.dv)
        self.out_proj = tnn.Linear(h * self.dv, d)
        self.init_heads(h, gate)

    def forward(self, x, c, mask):
        n, m = x.shape[1], c.shape[1]
        qt, kt = self.q_shared(x), self.k_shared(c)  # (B, N, Dk~), (B, M, Dk~)
        s = torch.einsum("bnr,ir,bmr->binm", qt, self.mixing, kt)  # (B, h, N, M)
        s = self.scale * (s + self.content_bias(c).transpose(1, 2).unsqueeze(2))  # + content_bias[i] . c[m]
        p = masked_softmax(s, allowed_mask(mask, n, m, self.causal))
        return self.finish(p @ split_heads(self.v_proj(c), self.h)), p


# ---- 1.5 synthesizer ----

class HeadwiseLinear(tnn.Module):
    def __init__(self, h, out, inp):
        super().__init__()
        self.weight = tnn.Parameter(torch.zeros(h, out, inp))  # (h, out, in)
        self.bias = tnn.Parameter(torch.zeros(h, out))  # (h, out)


class Dense(tnn.Module):
    def __init__(self, d, h, dh, L):
        super().__init__()
        self.h = h
        self.w1 = tnn.Linear(d, h * dh)
        self.w2 = HeadwiseLinear(h, L, dh)

    def forward(self, x):
        n = x.shape[1]
        H = split_heads(F.relu(self.w1(x)), self.h)  # (B, h, N, dh)
        return torch.einsum("bind,imd->binm", H, self.w2.weight[:, :n]) + self.w2.bias[:, None, :n]


class FactorizedDense(tnn.Module):
    def __init__(self, d, h, dh, a, b):
        super().__init__()
        self.h, self.a = h, a
        self.w1 = tnn.Linear(d, h * dh)
        self.wa = HeadwiseLinear(h, a, dh)
        self.wb = HeadwiseLinear(h, b, dh)

    def forward(self, x):
        n = x.shape[1]
        H = split_heads(F.relu(self.w1(x)), self.h)  # (B, h, N, dh)
        A = torch.einsum("bind,iad->bina", H, self.wa.weight) + self.wa.bias[:, None, :]  # (B, h, N, a)
        Bf = torch.einsum("bind,ied->bine", H, self.wb.weight) + self.wb.bias[:, None, :]  # (B, h, N, b)
        cols = [A[..., m % self.a] * Bf[..., m // self.a] for m in range(n)]
        return torch.stack(cols, -1)  # (B, h, N, N)


class RandomTable(tnn.Module):
    def __init__(self, h, L, trained):
        super().__init__()
        if trained:
            self.logits = tnn.Parameter(torch.zeros(h, L, L))
        else:
            self.register_buffer("logits", torch.zeros(h, L, L))

    def forward(self, x):
        n = x.shape[1]
        return self.logits[None, :, :n, :n]


class FactorizedRandom(tnn.Module):
    def __init__(self, h, L, k):
        super().__init__()
        self.r1 = tnn.Parameter(torch.zeros(h, L, k))
        self.r2 = tnn.Parameter(torch.zeros(h, L, k))

    def forward(self, x):
        n = x.shape[1]
        return (self.r1[:, :n] @ self.r2[:, :n].transpose(1, 2))[None]


class Vanilla(tnn.Module):
    def __init__(self, d, h, dk):
        super().__init__()
        self.h, self.dk = h, dk
        self.q_proj = tnn.Linear(d, h * dk)
        self.k_proj = tnn.Linear(d, h * dk)

    def forward(self, x):
        q, k = split_heads(self.q_proj(x), self.h), split_heads(self.k_proj(x), self.h)
        return q @ k.transpose(-2, -1) / math.sqrt(self.dk)


class Synthesizer(Heads):
    def __init__(self, d, parts, L, h, factor=8, a=None, b=None, causal=False):
        super().__init__()
        self.h, self.causal, self.parts = h, causal, parts
        dh = dk = dv = d // h
        make = {
            "dense": lambda: Dense(d, h, dh, L),
            "random": lambda: RandomTable(h, L, True),
            "fixed_random": lambda: RandomTable(h, L, False),
            "factorized_dense": lambda: FactorizedDense(d, h, dh, a, b),
            "factorized_random": lambda: FactorizedRandom(h, L, factor),
            "vanilla": lambda: Vanilla(d, h, dk),
        }
        for p in parts:
            self.add_module(p, make[p]())
        if len(parts) > 1:
            self.mix_logits = tnn.Parameter(torch.zeros(len(parts)))
        self.v_proj = tnn.Linear(d, h * dv)
        self.out_proj = tnn.Linear(h * dv, d)
        self.init_heads(h, False)

    def forward(self, x, c, mask):
        assert c is x, "synthesizer is self-attention only"
        b, n = x.shape[:2]
        if len(self.parts) == 1:
            s = getattr(self, self.parts[0])(x)
        else:
            w = torch.softmax(self.mix_logits, 0)
            s = sum(w[i] * getattr(self, p)(x) for i, p in enumerate(self.parts))
        s = s.expand(b, self.h, n, n)
        p = masked_softmax(s, allowed_mask(mask, n, n, self.causal))
        return self.finish(p @ split_heads(self.v_proj(x), self.h)), p


# ---- cases ----

D, B = 8, 2


def key_mask(rng, n, m):
    return gc.query_mask(rng, B, n, m)


def padding_mask(rng, n, m):
    return gc.padding_mask(B, m, pad=2)


# name: (spec, module factory, N, M (None = self-attention), mask factory or None, fixed tensors)
CASES = {
    "mha_cross_mask": ("mha(heads=2, key_size=3, value_size=5)",
                       lambda: MHA(D, 2, dk=3, dv=5), 4, 5, key_mask, {}),
    "mha_causal_gate": ("mha(heads=4, causal=true, gate=hard_concrete)",
                        lambda: MHA(D, 4, causal=True, gate=True), 5, None, None,
                        # g: head 0 and 3 inside (0, 1), head 2 clamped at 1; head 1 masked
                        {"gate.log_alpha": [-0.5, 0.3, 3.0, 1.2], "head_mask": [1.0, 0.0, 1.0, 1.0]}),
    "mha_no_key_bias": ("mha(heads=2, key_bias=false)",
                        lambda: MHA(D, 2, key_bias=False), 5, None, padding_mask, {}),
    "talking_heads_mixed": ("talking_heads(heads=4, logit_heads=2, value_heads=3)",
                            lambda: TalkingHeads(D, 4, hk=2, hv=3), 5, None, padding_mask, {}),
    "talking_heads_no_pre": ("talking_heads(heads=2, pre=false)",
                             lambda: TalkingHeads(D, 2, pre=False), 4, 5, key_mask, {}),
    "collaborative_random": ("collaborative(heads=2, shared_key_size=6, mixing_init=random)",
                             lambda: Collaborative(D, 2, dks=6), 4, 5, key_mask, {}),
    "collaborative_causal_gate": ("collaborative(heads=2, shared_key_size=4, causal=true, gate=hard_concrete)",
                                  lambda: Collaborative(D, 2, dks=4, causal=True, gate=True), 5, None, None,
                                  # head 0 gated to exactly 0 (clamped), head 1 inside (0, 1)
                                  {"gate.log_alpha": [-3.0, 0.7]}),
    "synthesizer_dense": ("synthesizer(parts=dense, max_len=8)",
                          lambda: Synthesizer(D, ["dense"], 8, 8), 5, None, None, {}),
    "synthesizer_random_vanilla": ("synthesizer(parts=random+vanilla, max_len=8, heads=2)",
                                   lambda: Synthesizer(D, ["random", "vanilla"], 8, 2), 5, None, padding_mask, {}),
    "synthesizer_factorized": (
        "synthesizer(parts=factorized_dense+factorized_random+fixed_random, max_len=8, heads=2, a=3, b=3, factor=3, "
        "causal=true)",
        lambda: Synthesizer(D, ["factorized_dense", "factorized_random", "fixed_random"], 8, 2, factor=3, a=3, b=3,
                            causal=True), 5, None, None, {}),
}


def run_case(name, factory, n, m, mask_fn, fixed):
    rng = gc.case_rng(name)
    torch.manual_seed(0)
    model = factory().eval()
    gc.randomize(model, rng, fixed)

    def check(out, att):
        if mask_fn is key_mask:  # the empty row: zero head outputs leave out_proj.bias alone
            assert torch.equal(att[1, :, 1], torch.zeros_like(att[1, :, 1]))
            assert torch.allclose(out[1, 1], model.out_proj.bias, rtol=0, atol=1e-15)

    return gc.forward_case(name, model, rng, (B, n, D), m, mask_fn, (n, m or n), check)


def main():
    gc.write_cases(__file__, CASES, run_case, D)


if __name__ == "__main__":
    main()
