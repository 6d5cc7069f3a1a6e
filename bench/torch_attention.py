"""torch_attention.py: PyTorch's half of `make bench-attention`, next to bench/bench_attention.cpp.

One attention layer core, B = 1, h = 8, dk = dv = 64, float32, in the standard materialising
form of PyTorch 1.13 (which has no scaled_dot_product_attention):

    s = (q @ k^T) * (1 / sqrt(dk))          (B, h, N, N)
    s = s.masked_fill(future, -inf)         causal only; `future` is an (N, N) bool buffer
    o = softmax(s, -1) @ v                  (B, h, N, dv)

then o.backward(g) with a random upstream gradient g, on leaves q, k, v requiring grad.

One measurement per process (run_attention.sh starts a fresh one per N, under a time limit):
RLIMIT_AS is set to --memory-limit GiB before torch is imported, so running out of memory is a
caught MemoryError / RuntimeError ("status": "oom", exit status 3), not the machine swapping.
Prints one JSON line: the median seconds of the timed steps after a warm-up step, and the
peak RSS (ru_maxrss). Steps and warm-up follow bench_attention.cpp: 5 steps up to N = 2K, 3 up
to 8K, then 1; the warm-up is a full step up to 8K, beyond it a 2K step.
"""
import argparse
import json
import math
import resource
import sys
import time

HEADS, HEAD_SIZE = 8, 64
OOM_EXIT = 3


def default_steps(n):
    return 5 if n <= 2048 else 3 if n <= 8192 else 1


def warmup_length(n):
    return n if n <= 8192 else 2048


def is_oom(e):
    return isinstance(e, MemoryError) or "can't allocate memory" in str(e) or "out of memory" in str(e).lower()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--memory-limit", type=float, default=20.0, help="GiB of address space (RLIMIT_AS)")
    opt = ap.parse_args()
    if opt.n < 1 or opt.threads < 1 or opt.steps < 0 or opt.memory_limit <= 0:
        ap.error(f"--n, --threads must be >= 1, --steps >= 0, --memory-limit > 0; got {vars(opt)}")
    limit = int(opt.memory_limit * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    head = {"side": "torch", "path": "materialising", "n": opt.n, "causal": opt.causal}

    import torch

    torch.set_num_threads(opt.threads)
    steps = opt.steps or default_steps(opt.n)

    def problem(n):
        g = torch.Generator().manual_seed(1)
        q = torch.randn(1, HEADS, n, HEAD_SIZE, generator=g).requires_grad_()  # (B, h, N, dk)
        k = torch.randn(1, HEADS, n, HEAD_SIZE, generator=g).requires_grad_()  # (B, h, M, dk)
        v = torch.randn(1, HEADS, n, HEAD_SIZE, generator=g).requires_grad_()  # (B, h, M, dv)
        up = torch.randn(1, HEADS, n, HEAD_SIZE, generator=g)  # (B, h, N, dv) upstream gradient
        future = torch.ones(n, n, dtype=torch.bool).triu_(1) if opt.causal else None  # (N, M)

        def step():
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HEAD_SIZE))  # (B, h, N, M)
            if future is not None:
                s = s.masked_fill(future, float("-inf"))
            o = torch.softmax(s, dim=-1) @ v  # (B, h, N, dv)
            del s  # a module's forward returns before backward: its scores are gone by then
            o.backward(up)
            q.grad = k.grad = v.grad = None

        return step

    try:
        problem(warmup_length(opt.n))()
        step = problem(opt.n)
        times = []
        for s in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
            print(f"torch_attention: N={opt.n}{' causal' if opt.causal else ''} step {s + 1}: {times[-1]:.3f} s",
                  file=sys.stderr)
    except (MemoryError, RuntimeError) as e:
        if not is_oom(e):
            raise
        print(json.dumps(dict(head, status="oom")), flush=True)
        return OOM_EXIT
    times.sort()
    mid = len(times) // 2
    seconds = times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps(dict(head, status="ok", seconds=seconds, steps=steps, max_rss_kib=rss,
                          threads=torch.get_num_threads(), torch=torch.__version__)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
