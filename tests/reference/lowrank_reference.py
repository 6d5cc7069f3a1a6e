#!/usr/bin/python3
"""Golden outputs and gradients from PyTorch for attnlab's sinkhorn, linformer, compressed and
nystrom attention (docs/attention.md).

The modules below are written from the documented bullets alone, in plain PyTorch (nn.Linear,
nn.Conv1d, nn.Conv2d, logsumexp, einsum), with exactly attnlab's parameter and buffer names and
shapes, so their state dicts load strictly into `nn::make_attention(spec, d_model)`.
tests/efficient/test_lowrank_golden.cpp reads the file this script writes:

    /usr/bin/python3 tests/reference/lowrank_reference.py   # rewrites lowrank_golden.safetensors

The file's layout is golden_common.py's, with CASE/mask the bool key mask (B|1, h|1, 1, M) and
CASE/attention sinkhorn's effective attention over the original keys or nystrom's F pinv(A) Bm
(absent for linformer and compressed, which have none). The layer is called in eval mode with
causal=false and need_weights.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_common as gc  # noqa: E402  (re-runs this script under /usr/bin/python3 if needed)
from golden_common import Projected, masked_softmax, split_heads  # noqa: E402
import torch  # noqa: E402
import torch.nn as tnn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ---- key masks (docs/attention.md, conventions) ----

def key_rows(mask):
    """(B|1, h|1, 1, M) key mask -> (B|1, h|1, M, 1) float, for zeroing rows."""
    return mask.transpose(-1, -2).to(torch.float64)


# ---- sinkhorn ----

class Sinkhorn(Projected):
    def __init__(self, d, h, block, iters=5, temperature=0.75, max_len=512, **kw):
        super().__init__(d, h, **kw)
        self.b, self.iters, self.temperature = block, iters, temperature
        self.sort_net = tnn.Linear(d, max_len // block, bias=kw.get("bias", True))

    def forward(self, x, c, mask):
        assert c is x, "sinkhorn is self-attention only"
        B, N, D = x.shape
        b, nb, h = self.b, N // self.b, self.h
        if mask is None:
            s = x.view(B, nb, b, D).mean(2)  # (B, nb, D)
        else:  # the mean over the positions some head allows; 0 for a block with none
            present = mask.any(1).reshape(-1, nb, b, 1).to(torch.float64)  # (B|1, nb, b, 1)
            s = (x.view(B, nb, b, D) * present).sum(2) / present.sum(2).clamp(min=1)
        bias = self.sort_net.bias[:nb] if self.sort_net.bias is not None else None
        R = F.linear(s, self.sort_net.weight[:nb], bias) / self.temperature  # (B, nb, nb)
        for _ in range(self.iters):
            R = R - torch.logsumexp(R, 2, keepdim=True)
            R = R - torch.logsumexp(R, 1, keepdim=True)
        P = torch.exp(R)
        q = split_heads(self.q_proj(x), h) / math.sqrt(self.dk)
        k, v = split_heads(self.k_proj(x), h), split_heads(self.v_proj(x), h)
        allowed = None
        if mask is not None:
            k, v = k * key_rows(mask), v * key_rows(mask)
            Bk, hk = mask.shape[:2]
            own = mask.reshape(Bk, hk, nb, 1, b)
            slot = mask.reshape(Bk, hk, nb, b).any(2).view(Bk, hk, 1, 1, b).expand(Bk, hk, nb, 1, b)
            allowed = torch.cat([own, slot], -1)  # (B|1, h|1, nb, 1, 2b)
        kb, vb = k.reshape(B, h, nb, b, self.dk), v.reshape(B, h, nb, b, self.dv)
        k_sorted = torch.einsum("bij,bhjrd->bhird", P, kb)
        v_sorted = torch.einsum("bij,bhjrd->bhird", P, vb)
        scores = q.reshape(B, h, nb, b, self.dk) @ torch.cat([kb, k_sorted], 3).transpose(-1, -2)
        p = masked_softmax(scores, allowed)  # (B, h, nb, b, 2b)
        o = (p @ torch.cat([vb, v_sorted], 3)).reshape(B, h, N, self.dv)
        eye = torch.eye(nb)
        att = torch.einsum("bhinr,ij->bhinjr", p[..., :b], eye) + torch.einsum("bhinr,bij->bhinjr", p[..., b:], P)
        att = att.reshape(B, h, N, N)
        if mask is not None:
            att = att * mask
        return self.finish(o), att


# ---- linformer ----

class Linformer(Projected):
    def __init__(self, d, h, proj_len, max_len, share=False, **kw):
        super().__init__(d, h, **kw)
        self.share = share
        self.proj_k = tnn.Parameter(torch.zeros(proj_len, max_len))
        if not share:
            self.proj_v = tnn.Parameter(torch.zeros(proj_len, max_len))

    def forward(self, x, c, mask):
        M = c.shape[1]
        q = split_heads(self.q_proj(x), self.h) / math.sqrt(self.dk)
        k, v = split_heads(self.k_proj(c), self.h), split_heads(self.v_proj(c), self.h)
        if mask is not None:
            k, v = k * key_rows(mask), v * key_rows(mask)
        E = self.proj_k[:, :M]
        Fv = (self.proj_k if self.share else self.proj_v)[:, :M]
        kp, vp = torch.einsum("rm,bhmd->bhrd", E, k), torch.einsum("rm,bhmd->bhrd", Fv, v)
        o = torch.softmax(q @ kp.transpose(-1, -2), -1) @ vp
        return self.finish(o), None


# ---- compressed ----

class Compressed(Projected):
    def __init__(self, d, h, stride, kv_heads=None, **kw):
        super().__init__(d, h, kv_heads=kv_heads, **kw)
        H, s, bias = kv_heads or h, stride, kw.get("bias", True)
        self.s = s
        self.compress_k = tnn.Conv1d(H * self.dk, h * self.dk, s, stride=s, bias=bias)
        self.compress_v = tnn.Conv1d(H * self.dv, h * self.dv, s, stride=s, bias=bias)

    def forward(self, x, c, mask):
        M = c.shape[1]
        q = split_heads(self.q_proj(x), self.h) / math.sqrt(self.dk)
        k, v = self.k_proj(c), self.v_proj(c)  # (B, M, H*d)
        allowed = None
        if mask is not None:
            assert mask.shape[1] == 1
            rows = mask[:, 0, 0, :, None].to(torch.float64)  # (B|1, M, 1)
            k, v = k * rows, v * rows
            allowed = mask.reshape(mask.shape[0], 1, 1, M // self.s, self.s).any(-1)  # (B|1, 1, 1, M/s)
        kc = split_heads(self.compress_k(k.transpose(1, 2)).transpose(1, 2), self.h)  # (B, h, M/s, dk)
        vc = split_heads(self.compress_v(v.transpose(1, 2)).transpose(1, 2), self.h)
        o = masked_softmax(q @ kc.transpose(-1, -2), allowed) @ vc
        return self.finish(o), None


# ---- nystrom ----

def newton_schulz(A, iters):
    m = A.shape[-1]
    absA = A.abs()
    norm1 = absA.sum(-2).max(-1).values  # max column sum
    norminf = absA.sum(-1).max(-1).values  # max row sum
    Z = A.transpose(-1, -2) / (norm1 * norminf)[..., None, None]
    I = torch.eye(m)
    for _ in range(iters):
        AZ = A @ Z
        Z = 0.25 * Z @ (13 * I - AZ @ (15 * I - AZ @ (7 * I - AZ)))
    return Z


class Nystrom(Projected):
    def __init__(self, d, h, landmarks, pinv_iters=6, conv=0, **kw):
        super().__init__(d, h, **kw)
        self.m, self.iters, self.kernel = landmarks, pinv_iters, conv
        if conv:
            self.conv = tnn.Conv2d(h, h, (conv, 1), groups=h, bias=False)

    def forward(self, x, c, mask):
        self_attention = c is x
        N, M, m = x.shape[1], c.shape[1], self.m
        q = split_heads(self.q_proj(x), self.h) / math.sqrt(self.dk)
        k, v = split_heads(self.k_proj(c), self.h), split_heads(self.v_proj(c), self.h)
        if mask is not None:
            k, v = k * key_rows(mask), v * key_rows(mask)
            if self_attention:
                q = q * key_rows(mask)
        B, h = q.shape[:2]
        q_l = q.reshape(B, h, m, N // m, self.dk).mean(3)
        k_l = k.reshape(B, h, m, M // m, self.dk).mean(3)
        Fk = torch.softmax(q @ k_l.transpose(-1, -2), -1)
        A = torch.softmax(q_l @ k_l.transpose(-1, -2), -1)
        Bm = masked_softmax(q_l @ k.transpose(-1, -2), mask)
        Z = newton_schulz(A, self.iters)
        o = Fk @ (Z @ (Bm @ v))
        if self.kernel:
            kk = self.kernel
            o = o + self.conv(F.pad(v, (0, 0, (kk - 1) // 2, kk // 2)))
        return self.finish(o), Fk @ Z @ Bm


# ---- cases ----

D, B = 8, 2


def padding_mask(rng, h, m):
    return gc.padding_mask(B, m, pad=m)  # batch 1 has no key: zero head outputs


def sparse_mask(rng, h, m):
    """(B, 1, 1, M): random keys, at least the first of each batch allowed."""
    mask = rng.random((B, 1, 1, m)) < 0.5
    mask[..., 0] = True
    return mask


def per_head_keys(rng, h, m):
    """(1, h, 1, M): a different key set per head."""
    mask = rng.random((1, h, 1, m)) < 0.6
    mask[..., 0] = True
    return mask


# name: (spec, module factory, N, M (None = self-attention), mask factory or None, fixed tensors)
CASES = {
    "sinkhorn_mask": ("sinkhorn(heads=2, block=2, max_len=8)",
                      lambda: Sinkhorn(D, 2, 2, max_len=8), 6, None, padding_mask, {}),
    "sinkhorn_gate_heads": ("sinkhorn(heads=2, block=3, iters=2, temperature=0.5, max_len=6, key_size=3, "
                            "gate=hard_concrete)",
                            lambda: Sinkhorn(D, 2, 3, iters=2, temperature=0.5, max_len=6, dk=3, gate=True), 6, None,
                            per_head_keys, {"gate.log_alpha": [-0.5, 3.0]}),
    "linformer_cross_mask": ("linformer(heads=2, key_size=3, value_size=5, proj_len=3, max_len=7)",
                             lambda: Linformer(D, 2, 3, 7, dk=3, dv=5), 4, 6, padding_mask, {}),
    "linformer_share_gate": ("linformer(heads=2, proj_len=2, max_len=8, share=kv, gate=hard_concrete)",
                             lambda: Linformer(D, 2, 2, 8, share=True, gate=True), 5, None, None,
                             {"gate.log_alpha": [0.4, -3.0]}),
    "compressed_cross_mask": ("compressed(heads=2, stride=2, key_size=3, value_size=2)",
                              lambda: Compressed(D, 2, 2, dk=3, dv=2), 4, 6, sparse_mask, {}),
    "compressed_kv_heads": ("compressed(heads=2, kv_heads=3, stride=3, key_size=2, value_size=2, bias=false)",
                            lambda: Compressed(D, 2, 3, kv_heads=3, dk=2, dv=2, bias=False), 6, None, padding_mask,
                            {}),
    "nystrom_conv_mask": ("nystrom(heads=2, landmarks=2, conv=3)",
                          lambda: Nystrom(D, 2, 2, conv=3), 6, None, padding_mask, {}),
    "nystrom_cross_heads": ("nystrom(heads=2, landmarks=3, pinv_iters=4, key_size=3, conv=0)",
                            lambda: Nystrom(D, 2, 3, pinv_iters=4, dk=3), 6, 9, per_head_keys, {}),
    "nystrom_even_conv": ("nystrom(heads=2, landmarks=4, conv=2, bias=false)",
                          lambda: Nystrom(D, 2, 4, conv=2, bias=False), 4, None, sparse_mask, {}),
}


def run_case(name, factory, n, m, mask_fn, fixed):
    rng = gc.case_rng(name)
    torch.manual_seed(0)
    model = factory().eval()
    gc.randomize(model, rng, fixed)

    def check(out, att):
        if mask_fn is padding_mask:  # batch 1 has no key: zero head outputs leave out_proj.bias
            bias = model.out_proj.bias if model.out_proj.bias is not None else torch.zeros(D)
            assert torch.allclose(out[1], bias.expand(n, D), rtol=0, atol=1e-15), name

    return gc.forward_case(name, model, rng, (B, n, D), m, mask_fn, (model.h, m or n), check)


def main():
    gc.write_cases(__file__, CASES, run_case, D)


if __name__ == "__main__":
    main()
