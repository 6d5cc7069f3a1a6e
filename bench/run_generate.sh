#!/bin/sh
# bench/run_generate.sh BUILD_DIR: sampling speed of the reference causal LM (4 layers, d=256,
# 8 heads, vocabulary 256), batch 1, 255 new tokens, in attnlab (bench_generate) and PyTorch
# (torch_generate.py), same thread count, one run; prints tokens/s and the ratios; then the same
# LM with talking_heads, local and linear attention, cached and uncached (attnlab only).
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
THREADS=${THREADS:-${ATTNLAB_NUM_THREADS:-$(nproc)}}
TOKENS=${TOKENS:-255}
export ATTNLAB_NUM_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS"
ours=$("$BUILD/bench/bench_generate" "$TOKENS") || { echo "bench_generate failed" >&2; exit 1; }
theirs=""
for py in ${PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import torch' >/dev/null 2>&1; then
    theirs=$("$py" "$HERE/torch_generate.py" "$TOKENS" "$THREADS") || theirs=""
    break
  fi
done
echo
echo "### 7. Generation: reference LM, batch 1, $TOKENS new tokens, $THREADS thread(s)"
echo
python3 - "$ours" "$theirs" <<'PY'
import json, sys
a = json.loads(sys.argv[1])
t = json.loads(sys.argv[2]) if sys.argv[2] else None
dash = "—"
print("| tokens/s | attnlab | torch | ratio |")
print("|---|---:|---:|---:|")
for key, name in (("cached_tokens_per_s", "with KV cache"), ("uncached_tokens_per_s", "without cache (full recomputation)")):
    ratio = f"{a[key] / t[key]:.2f}x" if t else dash
    print(f"| {name} | {a[key]:.0f} | {round(t[key]) if t else dash} | {ratio} |")
print(f"\nKV cache speed-up in attnlab: {a['cached_tokens_per_s'] / a['uncached_tokens_per_s']:.1f}x")
if a.get("variants"):
    print("\nOther attention variants in the same LM (attnlab only):\n")
    print("| attention | cache | tokens/s cached | tokens/s uncached | speed-up |")
    print("|---|---|---:|---:|---:|")
    kind = {"talking_heads": "KV cache", "local": "rolling window", "linear": "recurrent state"}
    for v in a["variants"]:
        name = v["attention"]
        c, u = v["cached_tokens_per_s"], v["uncached_tokens_per_s"]
        print(f"| `{name}` | {kind.get(name.split('(')[0], '')} | {c:.0f} | {u:.0f} | {c / u:.1f}x |")
PY
