"""The single-layer decoding steps of bench/bench_decode.cpp in PyTorch, for a side-by-side look
(optional: nothing builds or tests with it). One layer, D=512, h=8, dk=dv=64, batch 1, float32,
under torch.inference_mode(); each variant's decoding state is preallocated for CONTEXT + STEPS
positions and filled with CONTEXT random positions (the time of a step does not depend on the
values), then STEPS steps of T=1 are timed, the variants interleaved one step each in turn, as
bench_decode does. Prints a markdown table: tokens/s = 1 / median step time, ratio to mha.

    /usr/bin/python3 bench/torch_decode.py [--context 4096] [--steps 64] [--window 512] [--threads N]

Decoding states, written directly:
  mha, kv_heads=g   K and V (1, g, L, 64); grouped queries reshaped to (1, g, h/g, 64) against
                    their kv head (no copy of K and V to h heads)
  mla               the latent c (1, L, r) and RoPE key kr (1, L, dr), r = 128, dr = 32; absorbed:
                    scores (q_nope W_uk) c^T + q_rope kr^T, output (P c) W_uv^T; plain: k_nope and
                    v expanded from c through kv_up every step
  retention         S (1, h, 64, 64): S <- gamma S + k^T v, o = q S, then the group norm and gate
  local             the 4 sink rows and a ring buffer of the last W keys and values
"""
import argparse
import json
import statistics
import time

import torch

D, H, DK = 512, 8, 64


def linear(out_f, in_f):
    return torch.randn(out_f, in_f) / in_f ** 0.5


def rope(u, pos):
    """Rotate-half RoPE of u (..., d) at one position."""
    d = u.shape[-1]
    inv = 10000.0 ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
    ang = pos * inv
    cos, sin = torch.cos(ang).float(), torch.sin(ang).float()
    a, b = u[..., : d // 2], u[..., d // 2 :]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)


class Mha:
    def __init__(self, g, max_len, context):
        self.g = g
        self.wq, self.wk, self.wv, self.wo = linear(H * DK, D), linear(g * DK, D), linear(g * DK, D), linear(D, H * DK)
        self.k = torch.zeros(1, g, max_len, DK)
        self.v = torch.zeros(1, g, max_len, DK)
        self.k[:, :, :context] = torch.randn(1, g, context, DK)
        self.v[:, :, :context] = torch.randn(1, g, context, DK)
        self.length = context
        self.numel = self.k.numel() + self.v.numel()

    def step(self, x):  # x (1, 1, D)
        g, L = self.g, self.length + 1
        q = (x @ self.wq.T).view(1, g, H // g, DK)  # (1, g, h/g, dk): one query row per head of a group
        self.k[:, :, self.length] = (x @ self.wk.T).view(1, g, DK)
        self.v[:, :, self.length] = (x @ self.wv.T).view(1, g, DK)
        p = torch.softmax(q @ self.k[:, :, :L].transpose(-2, -1) / DK ** 0.5, -1)  # (1, g, h/g, L)
        o = p @ self.v[:, :, :L]  # (1, g, h/g, dv)
        self.length = L
        return o.reshape(1, 1, H * DK) @ self.wo.T


class Mla:
    R, DR = 128, 32

    def __init__(self, absorb, max_len, context):
        R, DR = self.R, self.DR
        self.absorb = absorb
        self.wq, self.w_down = linear(H * (DK + DR), D), linear(R + DR, D)
        self.w_up, self.wo, self.norm = linear(H * 2 * DK, R), linear(D, H * DK), torch.ones(R)
        self.c = torch.zeros(1, max_len, R)
        self.kr = torch.zeros(1, max_len, DR)
        self.c[:, :context] = torch.randn(1, context, R)
        self.kr[:, :context] = torch.randn(1, context, DR)
        self.length = context
        self.numel = self.c.numel() + self.kr.numel()

    def step(self, x):
        R, DR, L = self.R, self.DR, self.length + 1
        q = (x @ self.wq.T).view(1, H, DK + DR)
        q_nope, q_rope = q[..., :DK], rope(q[..., DK:], self.length)
        ckr = x @ self.w_down.T  # (1, 1, r + dr)
        c = ckr[..., :R]
        self.c[:, self.length] = (c * torch.rsqrt(c.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm)[:, 0]
        self.kr[:, self.length] = rope(ckr[..., R:], self.length)[:, 0]
        c_all, kr_all = self.c[:, :L], self.kr[:, :L]  # (1, L, r), (1, L, dr)
        w = self.w_up.view(H, 2 * DK, R)
        w_uk, w_uv = w[:, :DK], w[:, DK:]  # (h, dk, r), (h, dv, r)
        scale = (DK + DR) ** -0.5
        if self.absorb:
            q_lat = torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)  # (1, h, r): q_nope_i W_uk_i
            s = q_lat @ c_all.transpose(-2, -1) + q_rope @ kr_all.transpose(-2, -1)  # (1, h, L)
            p = torch.softmax(s * scale, -1)
            o = torch.bmm((p @ c_all).transpose(0, 1), w_uv.transpose(-2, -1)).transpose(0, 1)  # (1, h, dv)
        else:
            kv = (c_all @ self.w_up.T).view(1, L, H, 2 * DK).transpose(1, 2)  # (1, h, L, dk + dv)
            k_nope, v = kv[..., :DK], kv[..., DK:]
            s = (q_nope.unsqueeze(2) @ k_nope.transpose(-2, -1)).squeeze(2) + q_rope @ kr_all.transpose(-2, -1)
            p = torch.softmax(s * scale, -1)  # (1, h, L)
            o = (p.unsqueeze(2) @ v).squeeze(2)
        self.length = L
        return o.reshape(1, 1, H * DK) @ self.wo.T


class Retention:
    def __init__(self, max_len, context):
        self.wq, self.wk, self.wv, self.wg, self.wo = (linear(H * DK, D) for _ in range(5))
        self.gamma = (1 - 2.0 ** (-5 - torch.arange(H, dtype=torch.float32))).view(1, H, 1, 1)
        self.state = torch.randn(1, H, DK, DK)
        self.numel = self.state.numel()
        self.length = context

    def step(self, x):
        q = (x @ self.wq.T).view(1, H, 1, DK) / DK ** 0.5
        k = (x @ self.wk.T).view(1, H, 1, DK)
        v = (x @ self.wv.T).view(1, H, 1, DK)
        self.state = self.gamma * self.state + k.transpose(-2, -1) @ v  # (1, h, dk, dv)
        o = q @ self.state  # (1, h, 1, dv)
        o = (o - o.mean(-1, keepdim=True)) / torch.sqrt(o.var(-1, unbiased=False, keepdim=True) + 1e-5)
        self.length += 1
        return (torch.nn.functional.silu(x @ self.wg.T) * o.reshape(1, 1, H * DK)) @ self.wo.T


class Local:
    SINKS = 4

    def __init__(self, window, max_len, context):
        self.window = window
        self.wq, self.wk, self.wv, self.wo = (linear(H * DK, D) for _ in range(4))
        n = self.SINKS + window
        self.k = torch.randn(1, H, n, DK)  # sinks, then a ring buffer of the last `window` rows
        self.v = torch.randn(1, H, n, DK)
        self.numel = self.k.numel() + self.v.numel()
        self.length = context

    def step(self, x):
        slot = self.SINKS + self.length % self.window
        q = (x @ self.wq.T).view(1, H, 1, DK)
        self.k[:, :, slot] = (x @ self.wk.T).view(1, H, DK)
        self.v[:, :, slot] = (x @ self.wv.T).view(1, H, DK)
        p = torch.softmax(q @ self.k.transpose(-2, -1) / DK ** 0.5, -1)
        self.length += 1
        return (p @ self.v).reshape(1, 1, H * DK) @ self.wo.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    max_len = a.context + a.steps + 1
    variants = [
        ("mha(heads=8)", lambda: Mha(H, max_len, a.context)),
        ("mha(heads=8, kv_heads=2)", lambda: Mha(2, max_len, a.context)),
        ("mha(heads=8, kv_heads=1)", lambda: Mha(1, max_len, a.context)),
        ("mla(heads=8)", lambda: Mla(True, max_len, a.context)),
        ("mla(heads=8, absorb=false)", lambda: Mla(False, max_len, a.context)),
        ("retention(heads=8)", lambda: Retention(max_len, a.context)),
        (f"local(heads=8, window={a.window}, sink_tokens=4)", lambda: Local(a.window, max_len, a.context)),
    ]
    with torch.inference_mode():
        layers = [(name, make()) for name, make in variants]
        xs = torch.randn(a.steps + 1, 1, 1, D)
        for _, layer in layers:
            layer.step(xs[0])  # untimed first step
        times = {name: [] for name, _ in layers}
        for s in range(1, a.steps + 1):
            for name, layer in layers:
                t0 = time.perf_counter()
                layer.step(xs[s])
                times[name].append(time.perf_counter() - t0)
    rates = {name: 1 / statistics.median(t) for name, t in times.items()}
    mha = rates[layers[0][0]]
    print(f"#### torch {torch.__version__}, {torch.get_num_threads()} thread(s): one layer, D={D}, h={H}, dk=dv={DK}, "
          f"context {a.context}, median of {a.steps} steps of T=1, interleaved\n")
    print("| spec | cache B/token | tokens/s | ratio to mha |\n|---|---:|---:|---:|")
    for name, layer in layers:
        print(f"| `{name}` | {layer.numel * 4 / layer.length:.1f} | {rates[name]:.0f} | {rates[name] / mha:.2f}x |")
    print(json.dumps({"threads": torch.get_num_threads(), "tokens_per_s": rates}))


if __name__ == "__main__":
    main()
