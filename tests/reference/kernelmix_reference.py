#!/usr/bin/python3
"""Golden outputs and gradients from PyTorch for attnlab's linear, performer, fnet and mixer.

The modules below are written from docs/attention.md (conventions, "linear" to "mixer") alone,
with exactly attnlab's parameter and buffer names and shapes, so their state dicts load
strictly into `nn::make_attention(spec, d_model)`. tests/efficient/kernelmix_testing.hpp reads
the file this script writes:

    /usr/bin/python3 tests/reference/kernelmix_reference.py   # rewrites kernelmix_golden.safetensors

The formulas are computed independently of attnlab's: linear and performer use plain sums for
key masks, torch.cumsum over outer products (B, h, N, F, dv) for causality, and the masked
quadratic form for query-dependent masks; performer uses the unshifted exp (float64, moderate
values); fnet uses torch.fft; mixer torch's tanh GELU.

The file's layout is golden_common.py's; performer's `projection` is a sign-corrected-QR
orthogonal draw, CASE/attention the implicit normalised matrix (B, h, N, M) of linear and
performer (fnet and mixer have none, nor a head_mask). The layer is called in eval mode with
causal=false (causality comes from the spec) and need_weights. A query with no allowed key
gives a zero output and a zero attention row, also with eps = 0 (docs/attention.md, conventions).
"""
import math
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_common as gc  # noqa: E402  (re-runs this script under /usr/bin/python3 if needed)
from golden_common import Projected, split_heads  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as tnn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def to4(mask):
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    return mask


def kernel_attention(fq, fk, v, mask, causal, eps):
    """out[n] = sum_m allowed * (fq_n . fk_m) v_m / (sum_m allowed * fq_n . fk_m + eps), zero for
    a query with no allowed key. Returns (out (B,h,N,dv), attention (B,h,N,M))."""
    b, h, n, _ = fq.shape
    m = fk.shape[2]
    key_only = mask is None or to4(mask).shape[-2] == 1
    # the implicit matrix, always dense (what need_weights returns)
    allowed = torch.ones(n, m, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    if mask is not None:
        allowed = allowed & to4(mask)
    allowed = allowed.expand(b, h, n, m)
    a = (fq @ fk.transpose(-2, -1)) * allowed  # (B, h, N, M)
    row_any = allowed.any(-1, keepdim=True)
    den_dense = torch.where(row_any, a.sum(-1, keepdim=True) + eps, torch.ones(()))
    att = a / den_dense
    if not key_only:
        return att @ v, att
    # key masks: sums (or prefix sums) over the keys, no N x M form
    keep = torch.ones(b, h, m, 1, dtype=torch.bool) if mask is None else to4(mask).transpose(-2, -1).expand(b, h, m, 1)
    fkm = fk * keep  # masked keys contribute nothing
    if causal:
        outer = fkm.unsqueeze(-1) * v.unsqueeze(-2)  # (B, h, N, F, dv)
        s = torch.cumsum(outer, 2)
        z = torch.cumsum(fkm, 2)  # (B, h, N, F)
        num = torch.einsum("bhnf,bhnfd->bhnd", fq, s)
        den = (fq * z).sum(-1, keepdim=True)
        has = torch.cumsum(keep.to(torch.int64), 2) > 0  # (B, h, N, 1)
    else:
        num = fq @ (fkm.transpose(-2, -1) @ v)
        den = fq @ fkm.sum(2, keepdim=True).transpose(-2, -1)
        has = keep.any(2, keepdim=True)
    return num / torch.where(has, den + eps, torch.ones(())), att


class Linear(Projected):
    def __init__(self, d, h, dk=None, dv=None, eps=1e-6, causal=False, bias=True, gate=False):
        super().__init__(d, h, dk or d // h, dv or d // h, bias, gate)
        self.eps, self.causal = eps, causal

    def forward(self, x, c, mask):
        q, k, v = split_heads(self.q_proj(x), self.h), split_heads(self.k_proj(c), self.h), split_heads(self.v_proj(c), self.h)
        o, att = kernel_attention(F.elu(q) + 1, F.elu(k) + 1, v, mask, self.causal, self.eps)
        return self.finish(o), att


def orthogonal_projection(m, dk, gen):
    """Blocks of dk orthonormal rows (Q^T of a sign-corrected QR of a Gaussian matrix), rows
    rescaled to the norms of Gaussian vectors."""
    blocks = []
    for _ in range((m + dk - 1) // dk):
        q, r = torch.linalg.qr(torch.randn(dk, dk, generator=gen))
        q = q * torch.sign(torch.diagonal(r))
        blocks.append(q.T)
    w = torch.cat(blocks)[:m]
    return w * torch.randn(m, dk, generator=gen).norm(dim=1, keepdim=True)


class Performer(Projected):
    def __init__(self, d, h, m, dk=None, dv=None, eps=1e-6, causal=False, bias=True, gate=False):
        super().__init__(d, h, dk or d // h, dv or d // h, bias, gate)
        self.eps, self.causal, self.m = eps, causal, m
        self.register_buffer("projection", torch.zeros(m, self.dk))

    def phi(self, z):
        z = z / self.dk ** 0.25
        return torch.exp(z @ self.projection.T - (z * z).sum(-1, keepdim=True) / 2) / math.sqrt(self.m)

    def forward(self, x, c, mask):
        q, k, v = split_heads(self.q_proj(x), self.h), split_heads(self.k_proj(c), self.h), split_heads(self.v_proj(c), self.h)
        o, att = kernel_attention(self.phi(q), self.phi(k), v, mask, self.causal, self.eps)
        return self.finish(o), att


class FNet(tnn.Module):
    def forward(self, x, c, mask):
        assert c is x and mask is None
        return torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real, None


class TokenMlp(tnn.Module):
    def __init__(self, L, hm, bias):
        super().__init__()
        self.w1 = tnn.Linear(L, hm, bias=bias)
        self.w2 = tnn.Linear(hm, L, bias=bias)


class Mixer(tnn.Module):
    def __init__(self, L, hm, bias=True):
        super().__init__()
        self.token_mlp = TokenMlp(L, hm, bias)

    def forward(self, x, c, mask):
        assert c is x and mask is None
        n = x.shape[1]
        w1, w2 = self.token_mlp.w1, self.token_mlp.w2
        hid = torch.einsum("jn,bnc->bjc", w1.weight[:, :n], x)  # (B, hm, D)
        if w1.bias is not None:
            hid = hid + w1.bias[None, :, None]
        hid = F.gelu(hid, approximate="tanh")
        y = torch.einsum("nj,bjc->bnc", w2.weight[:n], hid)  # (B, N, D)
        if w2.bias is not None:
            y = y + w2.bias[None, :n, None]
        return y, None


# ---- cases ----

B = 2


def padding_mask(rng, n, m):
    return gc.padding_mask(B, m, pad=m)  # an empty batch element


def first_keys_mask(rng, n, m):
    """(B, 1, 1, M): batch 1 masks key 0, so causally its query 0 has no allowed key."""
    mask = np.ones((B, 1, 1, m), dtype=bool)
    mask[1, ..., 0] = False
    mask[0, ..., m - 2] = False
    return mask


def general_mask(rng, n, m):
    return gc.query_mask(rng, B, n, m)


# name: (spec, d_model, module factory, N, M (None = self), mask factory or None, fixed tensors)
CASES = {
    "linear_cross_keymask": ("linear(heads=2, key_size=3, value_size=5)", 8, lambda: Linear(8, 2, dk=3, dv=5),
                             4, 5, padding_mask, {}),
    "linear_causal_gate": ("linear(heads=2, causal=true, eps=0, gate=hard_concrete)", 8,
                           lambda: Linear(8, 2, eps=0.0, causal=True, gate=True), 5, None, first_keys_mask,
                           {"gate.log_alpha": [-0.5, 1.2]}),
    "linear_general_mask": ("linear(heads=2)", 8, lambda: Linear(8, 2), 5, None, general_mask, {}),
    "performer_ortho_pad": ("performer(heads=2, features=8)", 8, lambda: Performer(8, 2, 8), 5, None,
                            padding_mask, {}),
    "performer_causal": ("performer(heads=2, features=6, ortho=false, causal=true, eps=0, gate=hard_concrete)", 8,
                         lambda: Performer(8, 2, 6, eps=0.0, causal=True, gate=True), 5, None, first_keys_mask,
                         {"gate.log_alpha": [0.4, -1.0]}),
    "performer_cross_general": ("performer(heads=2, features=7, key_size=3, bias=false)", 8,
                                lambda: Performer(8, 2, 7, dk=3, bias=False), 4, 5, general_mask, {}),
    "fnet": ("fnet()", 6, lambda: FNet(), 5, None, None, {}),
    "mixer": ("mixer(max_len=8, hidden=6)", 8, lambda: Mixer(8, 6), 5, None, None, {}),
    "mixer_no_bias": ("mixer(max_len=5, hidden=4, bias=false)", 6, lambda: Mixer(5, 4, bias=False), 5, None, None,
                      {}),
}


def run_case(name, spec, d, factory, n, m, mask_fn, fixed):
    rng = gc.case_rng(name)
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    model = factory().eval()

    def projection(shape):
        if "ortho=false" in spec:
            return torch.randn(shape, generator=gen)
        return orthogonal_projection(shape[0], shape[1], gen)

    gc.randomize(model, rng, fixed, init={"projection": projection})

    def check(out, att):
        if mask_fn is padding_mask:  # the empty batch element: zero head outputs leave out_proj.bias alone
            assert torch.equal(att[1], torch.zeros_like(att[1]))
            assert torch.allclose(out[1], model.out_proj.bias.expand(n, d), rtol=0, atol=1e-15)
        if mask_fn is first_keys_mask and model.causal:  # eps = 0 and no allowed key: zero, not NaN
            assert torch.equal(att[1, :, 0], torch.zeros_like(att[1, :, 0]))

    return gc.forward_case(name, model, rng, (B, n, d), m, mask_fn, (n, m or n), check)


def main():
    golden = gc.GoldenFile(__file__, max_kib=100)
    for name, (spec, d, factory, n, m, mask_fn, fixed) in CASES.items():
        golden.add(name, spec, d, run_case(name, spec, d, factory, n, m, mask_fn, fixed))
    golden.save()


if __name__ == "__main__":
    main()
