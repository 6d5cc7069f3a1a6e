#!/usr/bin/python3
"""Golden outputs, gradients and updated buffers from PyTorch for attnlab's clustering variants.

`lsh` (Reformer) and `routing` (Routing Transformer) are written below from docs/attention.md
("lsh", "routing") alone, with attnlab's parameter and buffer names and shapes, and *densely*: every
round's allowed set is an N x N boolean matrix built from chunk ids, and routing's from cluster
ids, so nothing here shares the sorted/grouped layout of attnlab's fast paths. The buffers
(`rotations`, `centroids`) are random and stored with the weights, so both sides hash and route
identically. tests/efficient/test_lsh.cpp reads the file this script writes:

    /usr/bin/python3 tests/reference/cluster_reference.py   # rewrites cluster_golden.safetensors

The file's layout is golden_common.py's, with "CASE/buffer.<name>" the buffers after the
forward call (train-mode cases: the centroids) and metadata "CASE/mode" (eval or train). There is
no context: both variants are self-attention only. The layer is called with causal=false
(causality comes from the spec) and need_weights.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_common as gc  # noqa: E402  (re-runs this script under /usr/bin/python3 if needed)
from golden_common import Heads, merge_heads, split_heads  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as tnn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def base_allowed(mask, b, h, n, causal):
    """(B, h, N, N) bool: the user's mask and causality."""
    allowed = torch.ones(b, h, n, n, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask
    if causal:
        allowed = allowed & torch.ones(n, n, dtype=torch.bool).tril()
    return allowed


class LSH(Heads):
    """Shared-QK LSH attention, densely: per round, query n may use key m iff m's chunk (in the
    round's (bucket, position) order) is n's chunk or the one before it (cyclically)."""

    def __init__(self, d, h, nb, R, c, dk=None, dv=None, causal=False, gate=False):
        super().__init__()
        self.h, self.nb, self.R, self.c = h, nb, R, c
        self.dk, self.dv = dk or d // h, dv or d // h
        self.causal = causal
        self.q_proj = tnn.Linear(d, h * self.dk)
        self.v_proj = tnn.Linear(d, h * self.dv)
        self.out_proj = tnn.Linear(h * self.dv, d)
        self.init_heads(h, gate)
        self.register_buffer("rotations", torch.zeros(h, self.dk, R, nb // 2))

    def forward(self, x, mask):
        B, N, _ = x.shape
        nc = N // self.c
        q = split_heads(self.q_proj(x), self.h)  # (B, h, N, dk)
        v = split_heads(self.v_proj(x), self.h)
        k = F.normalize(q, dim=-1)  # shared QK: k^ = q/||q||
        with torch.no_grad():
            y = torch.einsum("bhnd,hdtr->bhtnr", k, self.rotations)  # (B, h, R, N, nb/2)
            buckets = torch.cat([y, -y], -1).argmax(-1)  # (B, h, R, N)
            key = buckets * N + torch.arange(N)  # (bucket, position) order
            rank = key.argsort(-1).argsort(-1)  # sorted index of each position
            chunk = rank // self.c  # (B, h, R, N)
            cn, cm = chunk.unsqueeze(-1), chunk.unsqueeze(-2)
            window = (cn == cm) | (cm == (cn - 1) % nc)  # (B, h, R, N, N), each key once
        allowed = window & base_allowed(mask, B, self.h, N, self.causal).unsqueeze(2)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(self.dk)  # (B, h, N, N)
        s = torch.where(torch.eye(N, dtype=torch.bool), torch.full_like(s, -1e5), s).unsqueeze(2)
        s = s.expand(B, self.h, self.R, N, N)
        any_t = allowed.any(-1)  # (B, h, R, N)
        s = s.masked_fill(~allowed, float("-inf"))
        lse = torch.logsumexp(s.masked_fill(~any_t.unsqueeze(-1), 0.0), -1)  # (B, h, R, N), finite where nothing is allowed
        p = torch.exp(s - lse.unsqueeze(-1))  # each round's probabilities; exp(-inf) = 0 where not allowed
        # o = sum_t softmax_t(lse_t) o_t, rounds with nothing allowed weigh 0
        any_q = any_t.any(2, keepdim=True)  # (B, h, 1, N)
        lse_m = lse.masked_fill(~any_t, float("-inf")).masked_fill(~any_q, 0.0)
        w = torch.where(any_t, torch.softmax(lse_m, 2), torch.zeros_like(lse))  # (B, h, R, N)
        att = (w.unsqueeze(-1) * p).sum(2)  # (B, h, N, N)
        return self.finish(att @ v), att


class Routing(Heads):
    """Routing attention, densely: allowed iff cluster(q[n]) == cluster(k[m]) or m == n."""

    def __init__(self, d, h, k, decay, dk=None, dv=None, causal=False, gate=False):
        super().__init__()
        self.h, self.k, self.decay = h, k, decay
        self.dk, self.dv = dk or d // h, dv or d // h
        self.causal = causal
        self.q_proj = tnn.Linear(d, h * self.dk)
        self.k_proj = tnn.Linear(d, h * self.dk)
        self.v_proj = tnn.Linear(d, h * self.dv)
        self.out_proj = tnn.Linear(h * self.dv, d)
        self.init_heads(h, gate)
        self.register_buffer("centroids", torch.zeros(h, k, self.dk))

    def forward(self, x, mask):
        B, N, _ = x.shape
        q = split_heads(self.q_proj(x), self.h)
        k = split_heads(self.k_proj(x), self.h)
        v = split_heads(self.v_proj(x), self.h)
        with torch.no_grad():
            qn, kn = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            cq = torch.einsum("bhnd,hcd->bhnc", qn, self.centroids).argmax(-1)  # (B, h, N)
            ck = torch.einsum("bhnd,hcd->bhnc", kn, self.centroids).argmax(-1)
            routed = (cq.unsqueeze(-1) == ck.unsqueeze(-2)) | torch.eye(N, dtype=torch.bool)
        allowed = routed & base_allowed(mask, B, self.h, N, self.causal)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(self.dk)
        row_any = allowed.any(-1, keepdim=True)
        s = torch.where(row_any, s.masked_fill(~allowed, float("-inf")), torch.zeros_like(s))
        att = torch.softmax(s, -1) * allowed
        o = (att @ v) * self.head_scale()
        if self.training:
            self.update(qn, kn, cq, ck)
        return self.out_proj(merge_heads(o)), att

    @torch.no_grad()
    def update(self, qn, kn, cq, ck):
        for i in range(self.h):
            vecs = torch.cat([qn[:, i].reshape(-1, self.dk), kn[:, i].reshape(-1, self.dk)])  # pooled q and k
            ids = torch.cat([cq[:, i].reshape(-1), ck[:, i].reshape(-1)])
            for c in range(self.k):
                chosen = vecs[ids == c]
                if len(chosen) == 0:
                    continue  # nothing assigned: keep the centroid
                mixed = self.decay * self.centroids[i, c] + (1 - self.decay) * chosen.mean(0)
                self.centroids[i, c] = F.normalize(mixed, dim=0)


# ---- cases ----

D, B = 8, 2


def query_mask(rng, n):
    return gc.query_mask(rng, B, n, n)


def padding_mask(rng, n):
    return gc.padding_mask(B, n, pad=3)


def both_masks(rng, n):
    return query_mask(rng, n) & padding_mask(rng, n)


def unit(rng, shape):
    t = rng.normal(size=shape)
    return t / np.linalg.norm(t, axis=-1, keepdims=True)


# name: (spec, factory, N, mask factory or None, mode, fixed tensors)
CASES = {
    "lsh_masked": ("lsh(heads=2, buckets=4, hashes=2, chunk=4)", lambda: LSH(D, 2, 4, 2, 4), 12, both_masks, "eval",
                   {}),
    "lsh_causal_gate": ("lsh(heads=2, buckets=6, hashes=3, chunk=3, causal=true, gate=hard_concrete)",
                        lambda: LSH(D, 2, 6, 3, 3, causal=True, gate=True), 9, None, "eval",
                        {"gate.log_alpha": [-0.5, 3.0]}),
    "lsh_one_chunk": ("lsh(heads=2, buckets=2, hashes=2, chunk=6, key_size=3, value_size=5)",
                      lambda: LSH(D, 2, 2, 2, 6, dk=3, dv=5), 6, padding_mask, "eval", {}),
    "routing_train": ("routing(heads=2, clusters=3, decay=0.9)", lambda: Routing(D, 2, 3, 0.9), 7, padding_mask,
                      "train", {}),
    "routing_causal_gate": ("routing(heads=2, clusters=2, key_size=3, value_size=5, causal=true, gate=hard_concrete)",
                            lambda: Routing(D, 2, 2, 0.999, dk=3, dv=5, causal=True, gate=True), 8, query_mask,
                            "eval", {"gate.log_alpha": [0.4, -3.0]}),
}


def run_case(name, factory, n, mask_fn, mode, fixed):
    rng = gc.case_rng(name)
    torch.manual_seed(0)
    model = factory().train(mode == "train")
    gc.randomize(model, rng, fixed, init={"centroids": lambda shape: unit(rng, shape),
                                          "rotations": lambda shape: rng.normal(size=shape)})
    weights = {k: t.clone() for k, t in model.state_dict().items()}  # before any update

    x = gc.leaf(rng, (B, n, D))
    mask_np = mask_fn(rng, n) if mask_fn else None
    mask = torch.from_numpy(mask_np) if mask_np is not None else None
    out, att = model(x, mask)
    record = gc.backward_record(model, rng, x, None, mask, out, att, weights)
    if mode == "train":
        for key, t in model.named_buffers():
            if key != "head_mask":
                record["buffer." + key] = t
                assert not torch.equal(t, weights[key]), f"{name}: {key} did not move"
    return gc.case_tensors(name, record)


def main():
    golden = gc.GoldenFile(__file__)
    for name, (spec, factory, n, mask_fn, mode, fixed) in CASES.items():
        golden.add(name, spec, D, run_case(name, factory, n, mask_fn, mode, fixed), mode=mode)
    golden.save()


if __name__ == "__main__":
    main()
