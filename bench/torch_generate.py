"""bench/bench_generate.cpp in PyTorch: the reference causal LM (4 layers, d=256, 8 heads,
vocabulary 256, max_len 512), batch 1, a 1-token prompt, N new tokens at temperature 1, with a
KV cache (written here: torch 1.13 has none built in) and without (full recomputation)."""
import json
import math
import sys
import time

import torch
import torch.nn as tnn
import torch.nn.functional as F

V, D, H, L, MAXLEN = 256, 256, 8, 4, 512


class Block(tnn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = tnn.LayerNorm(D), tnn.LayerNorm(D)
        self.q, self.k, self.v, self.o = (tnn.Linear(D, D) for _ in range(4))
        self.fc1, self.fc2 = tnn.Linear(D, 4 * D), tnn.Linear(4 * D, D)

    def forward(self, x, cache, start):
        # x (1, T, D); cache = [K (1, H, MAXLEN, dk), V] or None; rows start.. are new
        T = x.shape[1]
        h = self.norm1(x)
        split = lambda t: t.view(1, T, H, D // H).transpose(1, 2)
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        if cache is not None:
            cache[0][:, :, start:start + T] = k
            cache[1][:, :, start:start + T] = v
            k, v = cache[0][:, :, :start + T], cache[1][:, :, :start + T]
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)
        if T > 1:
            mask = torch.ones(T, k.shape[2], dtype=torch.bool).tril(start)
            s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, -1)
        x = x + self.o((p @ v).transpose(1, 2).reshape(1, T, D))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class LM(tnn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = tnn.Embedding(V, D), tnn.Embedding(MAXLEN, D)
        self.blocks = tnn.ModuleList([Block() for _ in range(L)])
        self.norm, self.head = tnn.LayerNorm(D), tnn.Linear(D, V)

    def forward(self, t, caches=None, start=0):
        T = t.shape[1]
        x = self.tok(t) + self.pos.weight[start:start + T]
        for i, b in enumerate(self.blocks):
            x = b(x, caches[i] if caches is not None else None, start)
        return self.head(self.norm(x))


@torch.no_grad()
def generate(model, n, cache):
    tokens = torch.zeros(1, 1, dtype=torch.long)
    caches = [[torch.zeros(1, H, MAXLEN, D // H), torch.zeros(1, H, MAXLEN, D // H)] for _ in range(L)] if cache else None
    nxt, start = tokens, 0
    for _ in range(n):
        if cache:
            logits = model(nxt, caches, start)
            start += nxt.shape[1]
        else:
            logits = model(tokens)
        p = torch.softmax(logits[:, -1], -1)
        nxt = torch.multinomial(p, 1)
        tokens = torch.cat([tokens, nxt], 1)
    return tokens


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 255
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else torch.get_num_threads()
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = LM().eval()
    generate(model, n, True)

    def rate(cache, r):
        t = []
        for _ in range(r):
            t0 = time.perf_counter()
            generate(model, n, cache)
            t.append(time.perf_counter() - t0)
        t.sort()
        return n / t[len(t) // 2]

    print(json.dumps({"cached_tokens_per_s": rate(True, reps), "uncached_tokens_per_s": rate(False, 1),
                      "new_tokens": n, "threads": threads}))


if __name__ == "__main__":
    main()
