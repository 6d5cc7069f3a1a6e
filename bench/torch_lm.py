"""The training steps of bench/bench_lm.cpp, in PyTorch, on the same models: pre-norm blocks,
GELU feed-forward 4x, learned positions, AdamW (lr 1e-4). Prints JSON.

  torch_lm.py [STEPS [THREADS]]                 the reference LM: 4 layers, d=256, 8 heads, N=256,
                                                batch 8, vocabulary 256
  torch_lm.py [STEPS [THREADS]] --gpt2-small    GPT-2 small: 12 layers, d=768, 12 heads, vocabulary
                                                50,257, 1,024 positions, batch 4 x 64, the head tied
                                                to the token embedding
  ... --gpt2-small --untied                     the head has its own weight and bias
"""
import argparse
import json
import math
import time

import torch
import torch.nn as tnn
import torch.nn.functional as F

# (B, N, V, D, H, L, positions)
REFERENCE = (8, 256, 256, 256, 8, 4, 256)
GPT2_SMALL = (4, 64, 50257, 768, 12, 12, 1024)


class Block(tnn.Module):
    def __init__(self, B, N, D, H):
        super().__init__()
        self.B, self.N, self.D, self.H = B, N, D, H
        self.norm1, self.norm2 = tnn.LayerNorm(D), tnn.LayerNorm(D)
        self.q, self.k, self.v, self.o = (tnn.Linear(D, D) for _ in range(4))
        self.fc1, self.fc2 = tnn.Linear(D, 4 * D), tnn.Linear(4 * D, D)
        self.register_buffer("causal", torch.ones(N, N, dtype=torch.bool).tril())

    def forward(self, x):
        B, N, D, H = self.B, self.N, self.D, self.H
        h = self.norm1(x)
        split = lambda t: t.view(B, N, H, D // H).transpose(1, 2)
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)
        p = torch.softmax(s.masked_fill(~self.causal, float("-inf")), -1)
        x = x + self.o((p @ v).transpose(1, 2).reshape(B, N, D))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class LM(tnn.Module):
    def __init__(self, shape, tied):
        super().__init__()
        B, N, V, D, H, L, P = shape
        self.N = N
        self.tok, self.pos = tnn.Embedding(V, D), tnn.Embedding(P, D)
        self.blocks = tnn.ModuleList([Block(B, N, D, H) for _ in range(L)])
        self.norm = tnn.LayerNorm(D)
        self.head = None if tied else tnn.Linear(D, V)

    def forward(self, t):
        x = self.tok(t) + self.pos.weight[: self.N]
        for b in self.blocks:
            x = b(x)
        x = self.norm(x)
        return x @ self.tok.weight.t() if self.head is None else self.head(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", nargs="?", type=int, default=10, help="timed steps after two warm-up steps")
    ap.add_argument("threads", nargs="?", type=int, default=torch.get_num_threads())
    ap.add_argument("--gpt2-small", action="store_true", help="GPT-2 small at batch 4 x 64, head tied")
    ap.add_argument("--untied", action="store_true", help="with --gpt2-small: the head has its own weight and bias")
    args = ap.parse_args()
    if args.untied and not args.gpt2_small:
        ap.error("--untied needs --gpt2-small")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shape = GPT2_SMALL if args.gpt2_small else REFERENCE
    B, N, V = shape[:3]
    model = LM(shape, tied=args.gpt2_small and not args.untied)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = torch.randint(0, V, (B, N)), torch.randint(0, V, (B, N))

    def step():
        loss = F.cross_entropy(model(x).view(B * N, V), y.view(B * N))
        opt.zero_grad()
        loss.backward()
        t0 = time.perf_counter()
        opt.step()
        return time.perf_counter() - t0

    for _ in range(2):
        step()
    times, adam = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        adam.append(step())
        times.append(time.perf_counter() - t0)
    times.sort()
    adam.sort()
    med = times[len(times) // 2]
    try:
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    except Exception:
        peak = None
    name = "reference" if not args.gpt2_small else "gpt2-small-untied" if args.untied else "gpt2-small"
    print(json.dumps({"model": name, "tokens_per_s": B * N / med, "step_ms": med * 1e3,
                      "step_ms_min": times[0] * 1e3, "step_ms_max": times[-1] * 1e3, "threads": args.threads,
                      "params": sum(p.numel() for p in model.parameters()), "peak_rss_bytes": peak,
                      "adam_ms": adam[len(adam) // 2] * 1e3}))


if __name__ == "__main__":
    main()
