"""bench/bench_generate.cpp in PyTorch: the reference causal LM (4 layers, d=256, 8 heads,
vocabulary 256, max_len 512, pre-norm, GELU 4x), batch 1, a 1-token prompt, new tokens sampled at
temperature 1, with a decoding cache and without (the whole sequence recomputed every step).

torch 1.13 has no decoding caches, so each attention variant is written here with the same
strategy as attnlab's forward_step (docs/attention.md, "Incremental decoding"):
  mha, talking_heads      preallocated K and V (talking_heads: both mixes on the new rows only)
  collaborative           preallocated shared keys k~, the content-bias terms and V
  synthesizer (dense)     preallocated V; the new logit rows from the new inputs
  local                   a rolling window of the last `window` keys and values
  linear, performer       the recurrent state sum_m phi(k_m) [v_m, 1]^T (performer: with the
                          running key shift, rescaled when it grows)
Uncached, every variant runs its causal forward over all positions; the dense ones with a
masked N x N softmax, linear and performer with their masked N x N kernel matrix (at these
lengths, N <= 512, cheaper in torch than a cumulative sum of (dk x dv) outer products).

    torch_generate.py TOKENS THREADS REPS UNCACHED_TOKENS SPEC...
Prints one JSON line, shaped like bench_generate's. As there, the cached tokens/s is the median
of REPS runs without a separate warm-up run (the median discards the first, slow, run).
"""
import json
import math
import sys
import time

import torch
import torch.nn as tnn
import torch.nn.functional as F

V, D, H, L, MAXLEN = 256, 256, 8, 4, 512
DK = D // H


def causal_band(T, start, window=None):
    """(T, start + T) bool: query start + t may attend key j (j <= start + t, within the window)."""
    n = torch.arange(start, start + T).unsqueeze(1)
    m = torch.arange(start + T).unsqueeze(0)
    allowed = m <= n
    if window is not None:
        allowed &= n - m <= window
    return allowed


def heads(t):
    """(1, T, H*d) -> (1, H, T, d)"""
    return t.view(1, t.shape[1], H, -1).transpose(1, 2)


def merge(o):
    """(1, H, T, dv) -> (1, T, H*dv)"""
    return o.transpose(1, 2).reshape(1, o.shape[2], -1)


def masked_softmax(s, start):
    T = s.shape[-2]
    if T > 1:  # one new row sees every key so far: no mask needed
        s = s.masked_fill(~causal_band(T, start)[:, -s.shape[-1]:], float("-inf"))
    return torch.softmax(s, -1)


class Mha(tnn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (tnn.Linear(D, D) for _ in range(4))

    def attend(self, q, k, v, start):
        p = masked_softmax((q @ k.transpose(-2, -1)) / math.sqrt(DK), start)  # (1, H, T, L)
        return self.o(merge(p @ v))

    def forward(self, x):
        return self.attend(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), 0)

    def make_cache(self):
        return [torch.zeros(1, H, MAXLEN, DK), torch.zeros(1, H, MAXLEN, DK)]

    def step(self, x, c, start):
        T = x.shape[1]
        c[0][:, :, start:start + T] = heads(self.k(x))
        c[1][:, :, start:start + T] = heads(self.v(x))
        return self.attend(heads(self.q(x)), c[0][:, :, :start + T], c[1][:, :, :start + T], start)


class TalkingHeads(Mha):
    """hk = h = hv = 8, both learned mixes."""

    def __init__(self):
        super().__init__()
        self.pre_mix = tnn.Parameter(torch.randn(H, H) / math.sqrt(H))
        self.post_mix = tnn.Parameter(torch.randn(H, H) / math.sqrt(H))

    def attend(self, q, k, v, start):
        j = (q @ k.transpose(-2, -1)) / math.sqrt(DK)  # (1, hk, T, L)
        w = masked_softmax(torch.einsum("bant,aj->bjnt", j, self.pre_mix), start)  # (1, h, T, L)
        u = torch.einsum("bjnt,jv->bvnt", w, self.post_mix)  # (1, hv, T, L)
        return self.o(merge(u @ v))


class Collaborative(tnn.Module):
    """Shared key size Dk~ = D, random mixing, a content bias per head."""

    def __init__(self):
        super().__init__()
        self.q_shared, self.k_shared = tnn.Linear(D, D, bias=False), tnn.Linear(D, D, bias=False)
        self.content_bias = tnn.Linear(D, H, bias=False)
        self.mixing = tnn.Parameter(torch.randn(H, D) * 0.2)
        self.v, self.o = tnn.Linear(D, D), tnn.Linear(D, D)
        self.scale = 1 / math.sqrt(D / H)

    def keys(self, x):
        """k~ (1, T, Dk~) and the scaled content-bias term (1, H, T)."""
        return self.k_shared(x), self.content_bias(x).transpose(1, 2) * self.scale

    def attend(self, x, ks, cb, v, start):
        qm = self.q_shared(x).unsqueeze(1) * self.mixing[None, :, None, :]  # (1, H, T, Dk~)
        s = (qm @ ks.unsqueeze(1).transpose(-2, -1)) * self.scale + cb.unsqueeze(2)  # (1, H, T, L)
        return self.o(merge(masked_softmax(s, start) @ v))

    def forward(self, x):
        ks, cb = self.keys(x)
        return self.attend(x, ks, cb, heads(self.v(x)), 0)

    def make_cache(self):
        return [torch.zeros(1, MAXLEN, D), torch.zeros(1, H, MAXLEN), torch.zeros(1, H, MAXLEN, DK)]

    def step(self, x, c, start):
        T = x.shape[1]
        c[0][:, start:start + T], c[1][:, :, start:start + T] = self.keys(x)
        c[2][:, :, start:start + T] = heads(self.v(x))
        return self.attend(x, c[0][:, :start + T], c[1][:, :, :start + T], c[2][:, :, :start + T], start)


class Synthesizer(tnn.Module):
    """The dense part: logits relu(x w1^T + b1) w2[i]^T + b2[i], max_len 512, hidden D/h."""

    def __init__(self):
        super().__init__()
        self.w1 = tnn.Linear(D, D)
        bound = 1 / math.sqrt(DK)
        self.w2 = tnn.Parameter(torch.empty(H, MAXLEN, DK).uniform_(-bound, bound))
        self.b2 = tnn.Parameter(torch.empty(H, MAXLEN).uniform_(-bound, bound))
        self.v, self.o = tnn.Linear(D, D), tnn.Linear(D, D)

    def attend(self, x, v, start):
        length = v.shape[2]
        hd = heads(F.relu(self.w1(x)))  # (1, H, T, dh)
        s = hd @ self.w2[:, :length].transpose(-2, -1) + self.b2[:, None, :length]  # (1, H, T, L)
        return self.o(merge(masked_softmax(s, start) @ v))

    def forward(self, x):
        return self.attend(x, heads(self.v(x)), 0)

    def make_cache(self):
        return [torch.zeros(1, H, MAXLEN, DK)]

    def step(self, x, c, start):
        T = x.shape[1]
        c[0][:, :, start:start + T] = heads(self.v(x))
        return self.attend(x, c[0][:, :, :start + T], start)


class Local(Mha):
    """Causal local attention: query n attends keys n - window ... n."""

    def __init__(self, window):
        super().__init__()
        self.window = window

    def forward(self, x):
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(DK)  # (1, H, N, N)
        s = s.masked_fill(~causal_band(x.shape[1], 0, self.window), float("-inf"))
        return self.o(merge(torch.softmax(s, -1) @ v))

    def make_cache(self):
        return [None, None]

    def step(self, x, c, start):
        T = x.shape[1]
        k, v = heads(self.k(x)), heads(self.v(x))
        if c[0] is not None:
            k, v = torch.cat([c[0], k], 2), torch.cat([c[1], v], 2)  # (1, H, P + T, d)
        s = (heads(self.q(x)) @ k.transpose(-2, -1)) / math.sqrt(DK)  # (1, H, T, P + T)
        if T > 1 or k.shape[2] > self.window + 1:
            s = s.masked_fill(~causal_band(T, start, self.window)[:, -k.shape[2]:], float("-inf"))
        keep = min(k.shape[2], self.window)
        c[0], c[1] = k[:, :, -keep:].contiguous(), v[:, :, -keep:].contiguous()  # the rolling window
        return self.o(merge(torch.softmax(s, -1) @ v))


class Linear(Mha):
    """phi(z) = elu(z) + 1, eps 1e-6 on the denominator."""

    eps = 1e-6

    def features(self, q, k):
        return F.elu(q) + 1, F.elu(k) + 1, None

    def forward(self, x):
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        fq, fk, eps = self.features(q, k)
        a = (fq @ fk.transpose(-2, -1)).tril()  # (1, H, N, N) kernel matrix, causal
        den = a.sum(-1, keepdim=True) + (self.eps if eps is None else eps)
        return self.o(merge((a @ v) / den))

    def make_cache(self):
        return {"state": torch.zeros(1, H, self.feature_count(), DK + 1), "shift": None}

    def feature_count(self):
        return DK

    def step_features(self, q, k, c):
        return self.features(q, k)

    def step(self, x, c, start):
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        fq, fk, eps = self.step_features(q, k, c)
        v1 = torch.cat([v, torch.ones_like(v[..., :1])], -1)  # (1, H, T, dv + 1)
        out = fq @ c["state"]  # (1, H, T, dv + 1): the past
        if x.shape[1] > 1:
            out = out + (fq @ fk.transpose(-2, -1)).tril() @ v1  # the new rows among themselves
        else:
            out = out + (fq * fk).sum(-1, keepdim=True) * v1
        c["state"] += fk.transpose(-2, -1) @ v1
        return self.o(merge(out[..., :DK] / (out[..., DK:] + (self.eps if eps is None else eps))))


class Performer(Linear):
    """FAVOR+ with m = 256 positive random features, the exponents shifted for stability as in
    attnlab (per query row; per (b, h) over the keys, a running maximum when decoding)."""

    def __init__(self, features=256):
        super().__init__()
        self.register_buffer("w", torch.randn(features, DK))

    def feature_count(self):
        return self.w.shape[0]

    def exponent(self, z):
        zs = z * DK ** -0.25
        return zs @ self.w.t() - (zs * zs).sum(-1, keepdim=True) * 0.5  # (1, H, T, m)

    def shifted(self, eq, ek, key_shift):
        a = eq.amax(-1, keepdim=True)  # (1, H, T, 1)
        inv = 1 / math.sqrt(self.w.shape[0])
        eps = torch.exp(math.log(self.eps) - (a + key_shift))
        return torch.exp(eq - a) * inv, torch.exp(ek - key_shift) * inv, eps

    def features(self, q, k):
        eq, ek = self.exponent(q), self.exponent(k)
        return self.shifted(eq, ek, ek.amax((2, 3), keepdim=True))

    def step_features(self, q, k, c):
        eq, ek = self.exponent(q), self.exponent(k)
        shift = ek.amax((2, 3), keepdim=True)  # (1, H, 1, 1)
        if c["shift"] is not None:
            shift = torch.maximum(shift, c["shift"])
            c["state"] *= torch.exp(c["shift"] - shift)
        c["shift"] = shift
        return self.shifted(eq, ek, shift)


def make_attention(spec):
    name, _, rest = spec.partition("(")
    opts = dict(kv.strip().split("=") for kv in rest.rstrip(")").split(",") if "=" in kv)
    if name == "mha":
        return Mha()
    if name == "talking_heads":
        return TalkingHeads()
    if name == "collaborative":
        return Collaborative()
    if name == "synthesizer":
        return Synthesizer()
    if name == "local":
        return Local(int(opts.get("window", 32)))
    if name == "linear":
        return Linear()
    if name == "performer":
        return Performer(int(opts.get("features", 256)))
    raise SystemExit(f"torch_generate.py: no torch version of attention '{spec}'")


class Block(tnn.Module):
    def __init__(self, spec):
        super().__init__()
        self.norm1, self.norm2 = tnn.LayerNorm(D), tnn.LayerNorm(D)
        self.attn = make_attention(spec)
        self.fc1, self.fc2 = tnn.Linear(D, 4 * D), tnn.Linear(4 * D, D)

    def forward(self, x, cache, start):
        h = self.norm1(x)
        x = x + (self.attn(h) if cache is None else self.attn.step(h, cache, start))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class LM(tnn.Module):
    def __init__(self, spec):
        super().__init__()
        self.tok, self.pos = tnn.Embedding(V, D), tnn.Embedding(MAXLEN, D)
        self.blocks = tnn.ModuleList([Block(spec) for _ in range(L)])
        self.norm, self.head = tnn.LayerNorm(D), tnn.Linear(D, V)

    def forward(self, t, caches=None, start=0):
        T = t.shape[1]
        x = self.tok(t) + self.pos.weight[start:start + T]
        for i, b in enumerate(self.blocks):
            x = b(x, caches[i] if caches is not None else None, start)
        return self.head(self.norm(x))


@torch.inference_mode()
def generate(model, n, cache):
    tokens = torch.zeros(1, 1, dtype=torch.long)
    caches = [b.attn.make_cache() for b in model.blocks] if cache else None
    nxt, start = tokens, 0
    for _ in range(n):
        if cache:
            logits = model(nxt, caches, start)
            start += nxt.shape[1]
        else:
            logits = model(tokens)
        nxt = torch.multinomial(torch.softmax(logits[:, -1], -1), 1)
        tokens = torch.cat([tokens, nxt], 1)
    return tokens


def rate(model, n, cache, reps):
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        generate(model, n, cache)
        t.append(time.perf_counter() - t0)
    t.sort()
    return n / t[len(t) // 2]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 255
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else torch.get_num_threads()
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    n_uncached = int(sys.argv[4]) if len(sys.argv) > 4 else n
    specs = sys.argv[5:] or ["mha(heads=8)"]
    torch.set_num_threads(threads)
    variants = []
    for spec in specs:
        torch.manual_seed(0)
        model = LM(spec).eval()
        variants.append({"attention": spec, "cached_tokens_per_s": rate(model, n, True, reps),
                         "uncached_tokens_per_s": rate(model, n_uncached, False, 1)})
    print(json.dumps({"torch": torch.__version__, "new_tokens": n, "uncached_new_tokens": n_uncached, "reps": reps,
                      "threads": threads, "variants": variants}))


if __name__ == "__main__":
    main()
