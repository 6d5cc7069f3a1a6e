#!/usr/bin/python3
"""Golden outputs and gradients from PyTorch for attnlab's `longformer` and `bigbird`.

The modules below are dense-masked implementations written from ATTENTION_SPEC.md section 2
alone: they build the full (N, M) "allowed" matrix from the spec's rule and run masked softmax
attention, with exactly attnlab's parameter and buffer names (q_proj, k_proj, v_proj, out_proj,
q_global, k_global, v_global, gate.log_alpha, head_mask, random_blocks), so their state dicts
load strictly into `nn::make_attention(spec, d_model)`. bigbird's random_blocks are drawn here,
by NumPy, and attnlab loads them from the file. tests/efficient/test_bigbird.cpp reads the file
this script writes:

    /usr/bin/python3 tests/reference/blocks_reference.py   # rewrites blocks_golden.safetensors

Layout (float64; random_blocks int64; masks bool), for case CASE:

    CASE/w/<name>         every parameter and persistent buffer
    CASE/x, CASE/context  inputs (context only for cross-attention)
    CASE/mask             the bool "allowed" mask (when the case has one)
    CASE/grad_output      upstream gradient of the output
    CASE/output           expected output (B, N, D)
    CASE/attention        expected probabilities (B, h, N, M)
    CASE/grad.x, CASE/grad.context, CASE/grad.<param>, CASE/grad.head_mask

and metadata "CASE/spec", "CASE/d_model". The layer runs in eval mode with causal=false (causality
comes from the spec) and need_weights. Each case draws from a generator seeded by its name.
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
    sys.exit("blocks_reference.py needs NumPy and PyTorch: apt-get install python3-numpy python3-torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_lite  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "blocks_golden.safetensors")
torch.set_default_dtype(torch.float64)


def masked_softmax(s, allowed):
    """softmax over the last dim where `allowed`; a row with nothing allowed is all zeros."""
    allowed = allowed.expand_as(s)
    row_any = allowed.any(-1, keepdim=True)
    s = s.masked_fill(~allowed, float("-inf"))
    s = torch.where(row_any, s, torch.zeros_like(s))
    return torch.softmax(s, -1) * allowed


def split_heads(t, h):
    b, n, hd = t.shape
    return t.view(b, n, h, hd // h).transpose(1, 2)  # (B, h, N, d)


def merge_heads(t):
    b, h, n, d = t.shape
    return t.transpose(1, 2).reshape(b, n, h * d)  # (B, N, h*d)


class Gate(tnn.Module):
    """Hard Concrete gate in eval mode: clamp(sigmoid(log_alpha) (zeta - gamma) + gamma, 0, 1)."""

    def __init__(self, h):
        super().__init__()
        self.log_alpha = tnn.Parameter(torch.full((h,), 2.0))

    def forward(self):
        return torch.clamp(torch.sigmoid(self.log_alpha) * 1.2 - 0.1, 0.0, 1.0)


class Projected(tnn.Module):
    """The MHA projections, gate and head_mask (spec section 0 and 1.4)."""

    def __init__(self, d, h, dk, dv, bias, gate):
        super().__init__()
        self.h, self.dk, self.dv = h, dk, dv
        self.q_proj = tnn.Linear(d, h * dk, bias=bias)
        self.k_proj = tnn.Linear(d, h * dk, bias=bias)
        self.v_proj = tnn.Linear(d, h * dv, bias=bias)
        self.out_proj = tnn.Linear(h * dv, d, bias=bias)
        if gate:
            self.gate = Gate(h)
        self.register_buffer("head_mask", torch.ones(h))

    def attend(self, lq, lk, lv, x, c, allowed):
        q, k, v = split_heads(lq(x), self.h), split_heads(lk(c), self.h), split_heads(lv(c), self.h)
        p = masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(self.dk), allowed)  # (B, h, N, M)
        return p, p @ v

    def finish(self, o):
        s = self.gate() * self.head_mask if hasattr(self, "gate") else self.head_mask
        return self.out_proj(merge_heads(o * s.view(1, -1, 1, 1)))


class Longformer(Projected):
    """allowed iff n or m is global, or |n - m| <= w d and (n - m) mod d == 0; m <= n when causal.
    Global positions >= N are ignored (also as keys when M > N)."""

    def __init__(self, d, h, window, dilation, glob, separate=False, causal=False, gate=False, dk=None, dv=None):
        super().__init__(d, h, dk or d // h, dv or d // h, True, gate)
        self.w, self.dil, self.glob, self.causal = window, dilation, list(glob), causal
        if separate:
            self.q_global = tnn.Linear(d, h * self.dk)
            self.k_global = tnn.Linear(d, h * self.dk)
            self.v_global = tnn.Linear(d, h * self.dv)

    def rule(self, n, m):
        i, j = torch.arange(n)[:, None], torch.arange(m)[None, :]
        row_g = torch.tensor([r in self.glob for r in range(n)])[:, None]  # (N, 1)
        col_g = torch.tensor([c in self.glob and c < n for c in range(m)])[None, :]  # (1, M): >= N ignored
        diff = i - j
        allowed = row_g | col_g | ((diff.abs() <= self.w * self.dil) & (torch.remainder(diff, self.dil) == 0))
        if self.causal:
            allowed = allowed & (j <= i)
        return allowed, row_g

    def forward(self, x, c, mask):
        allowed, row_g = self.rule(x.shape[1], c.shape[1])
        if mask is not None:
            allowed = allowed & mask
        p, o = self.attend(self.q_proj, self.k_proj, self.v_proj, x, c, allowed)
        if hasattr(self, "q_global"):  # global rows: their own projections against every key
            pg, og = self.attend(self.q_global, self.k_global, self.v_global, x, c, allowed)
            p = torch.where(row_g, pg, p)
            o = torch.where(row_g, og, o)
        return self.finish(o), p


class BigBird(Projected):
    """Blocks qb = n // b, kb = m // b: allowed iff qb < g, kb < g, |kb - qb| <= (W-1)/2, or kb in
    random_blocks[i, qb, :]."""

    def __init__(self, d, h, block, window, glob, rand, max_len, rng, gate=False):
        super().__init__(d, h, d // h, d // h, True, gate)
        self.b, self.W, self.g = block, window, glob
        nb, half = max_len // block, (window - 1) // 2
        table = np.zeros((h, nb, rand), dtype=np.int64)
        for i in range(h):
            for j in range(glob, nb):
                cands = [kb for kb in range(nb) if kb >= glob and abs(kb - j) > half]
                table[i, j] = rng.choice(cands, rand, replace=False)
        self.register_buffer("random_blocks", torch.from_numpy(table))

    def rule(self, n, m):
        qb, kb = torch.arange(n) // self.b, torch.arange(m) // self.b
        half = (self.W - 1) // 2
        base = (qb[:, None] < self.g) | (kb[None, :] < self.g) | ((kb[None, :] - qb[:, None]).abs() <= half)
        rand = self.random_blocks[:, qb, :]  # (h, N, r)
        hit = (rand[:, :, :, None] == kb[None, None, None, :]).any(2)  # (h, N, M)
        return base[None] | hit  # (h, N, M)

    def forward(self, x, c, mask):
        allowed = self.rule(x.shape[1], c.shape[1])[None]  # (1, h, N, M)
        if mask is not None:
            allowed = allowed & mask
        p, o = self.attend(self.q_proj, self.k_proj, self.v_proj, x, c, allowed)
        return self.finish(o), p


D, B = 8, 2


def rows_mask(rng, n, m):
    """(B, 1, N, M) query-dependent mask; batch 1, query row 1 allows nothing."""
    mask = rng.random((B, 1, n, m)) < 0.7
    mask[:, :, :, 0] = True
    mask[1, 0, 1, :] = False
    return mask


def padding_mask(rng, n, m):
    """(B, 1, 1, M) key padding: batch 0 pads its last key, batch 1 its last three."""
    mask = np.ones((B, 1, 1, m), dtype=bool)
    mask[0, ..., m - 1:] = False
    mask[1, ..., m - 3:] = False
    return mask


# name: (spec, module factory(rng), N, M (None = self-attention), mask factory or None, fixed tensors)
CASES = {
    "longformer_dilated_mask": ("longformer(heads=2, window=2, dilation=2, global=0+5)",
                                lambda rng: Longformer(D, 2, 2, 2, [0, 5]), 9, None, padding_mask, {}),
    "longformer_causal_separate_gate": (
        "longformer(heads=2, window=1, global_first=2, separate_global=true, causal=true, gate=hard_concrete)",
        lambda rng: Longformer(D, 2, 1, 1, [0, 1], separate=True, causal=True, gate=True), 7, None, None,
        {"gate.log_alpha": [-0.5, 3.0]}),
    "longformer_cross_separate": (
        "longformer(heads=2, key_size=3, value_size=5, window=1, dilation=2, global=1+4+6, separate_global=true)",
        lambda rng: Longformer(D, 2, 1, 2, [1, 4, 6], separate=True, dk=3, dv=5), 5, 8, rows_mask, {}),
    "longformer_blocks": ("longformer(heads=1, key_size=4, value_size=4, window=1, dilation=2, global=5)",
                          lambda rng: Longformer(D, 1, 1, 2, [5], dk=4, dv=4), 40, None, rows_mask, {}),
    "bigbird_mask": ("bigbird(heads=2, block=2, window=3, global=1, random=1, max_len=16)",
                     lambda rng: BigBird(D, 2, 2, 3, 1, 1, 16, rng), 12, None, padding_mask, {}),
    "bigbird_cross": ("bigbird(heads=2, block=2, window=1, global=1, random=2, max_len=16)",
                      lambda rng: BigBird(D, 2, 2, 1, 1, 2, 16, rng), 8, 12, rows_mask, {}),
}


def run_case(name, factory, n, m, mask_fn, fixed):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    torch.manual_seed(0)
    model = factory(rng).eval()
    with torch.no_grad():
        for key, t in model.state_dict().items():
            if key == "random_blocks":
                continue
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
    if mask_fn is rows_mask:  # the empty row: zero head outputs leave out_proj.bias alone
        assert torch.equal(att[1, :, 1], torch.zeros_like(att[1, :, 1]))
        assert torch.allclose(out[1, 1], model.out_proj.bias, rtol=0, atol=1e-15)
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
        tensors.update(run_case(name, factory, n, m, mask_fn, fixed))
        metadata[f"{name}/spec"] = spec
        metadata[f"{name}/d_model"] = str(D)
    metadata["generator"] = "tests/reference/blocks_reference.py (PyTorch %s)" % torch.__version__
    safetensors_lite.save(OUT, tensors, metadata)
    if os.path.getsize(OUT) > 150 * 1024:  # committed to the repository: keep the cases small
        sys.exit(f"{OUT} is {os.path.getsize(OUT)} bytes; keep it under 150 KiB")
    print(f"wrote {OUT}: {len(CASES)} cases, {len(tensors)} tensors, {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
