#!/bin/sh
# bench/run_generate.sh BUILD_DIR: section 7 of `make bench`. Sampling speed of the reference
# causal LM (4 layers, d=256, 8 heads, vocabulary 256, max_len 512), batch 1, a 1-token prompt,
# temperature 1, for every attention variant with a decoding cache, in attnlab (bench_generate)
# and in PyTorch (torch_generate.py: the same layers and cache strategies written by hand),
# cached and uncached; prints tokens/s and the ratios, also written to BUILD_DIR/bench/generate.md.
#
#   THREADS=N          thread count for both (default: ATTNLAB_NUM_THREADS, else every core)
#   TOKENS=T           new tokens per cached run (default 255)
#   UNCACHED_TOKENS=U  new tokens of the one uncached run (default 127: recomputing everything
#                      costs about the square of the length, and 255 would double the run time)
#   REPS=R             cached runs per variant, median kept (default 3; the first run is the
#                      warm-up, which the median discards)
#   VARIANTS="spec;spec"  the attention specs (default: the seven below), separated by ';'
#   PYTHON             the python3 that has torch; NO_TORCH=1 for attnlab-only numbers
#
# The two programs alternate variant by variant (one process per variant and side), so both
# sides of each ratio are measured within seconds of each other. An estimated 2-2.5 minutes on 2 quiet
# cores. Never fails because attnlab is slower; only a crash of bench_generate fails it.
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT="$BUILD/bench"
THREADS=${THREADS:-${ATTNLAB_NUM_THREADS:-$(nproc)}}
TOKENS=${TOKENS:-255}
UNCACHED_TOKENS=${UNCACHED_TOKENS:-127}
REPS=${REPS:-3}
VARIANTS=${VARIANTS:-"mha(heads=8);talking_heads(heads=8);collaborative(heads=8);synthesizer(heads=8);local(window=64, heads=8);linear(heads=8);performer(heads=8)"}
BIN="$BUILD/bench/bench_generate"
if [ ! -x "$BIN" ]; then
  echo "run_generate: $BIN is missing; build it first (make bench does, or cmake --build $BUILD --target bench_generate)" >&2
  exit 1
fi
export ATTNLAB_NUM_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"

. "$HERE/common.sh"  # TORCH_PY, REPORT_PY, LOAD_START
[ -n "$TORCH_PY" ] || echo "run_generate: python3-torch not found (or NO_TORCH set): attnlab-only numbers" >&2

export TOKENS UNCACHED_TOKENS REPS THREADS
mkdir -p "$OUT"
rm -f "$OUT"/generate.attnlab.*.json "$OUT"/generate.torch.*.json
i=0
# Split VARIANTS on ';' only (the specs contain spaces and commas).
OLD_IFS=$IFS
IFS=';'
for spec in $VARIANTS; do
  IFS=$OLD_IFS
  i=$((i + 1))
  echo "run_generate: $spec: attnlab" >&2
  "$BIN" "$TOKENS" "$REPS" "$UNCACHED_TOKENS" "$spec" >"$OUT/generate.attnlab.$i.json" ||
    { echo "run_generate: bench_generate failed on $spec" >&2; exit 1; }
  if [ -n "$TORCH_PY" ]; then
    echo "run_generate: $spec: torch" >&2
    "$TORCH_PY" "$HERE/torch_generate.py" "$TOKENS" "$THREADS" "$REPS" "$UNCACHED_TOKENS" "$spec" \
      >"$OUT/generate.torch.$i.json" || { echo "run_generate: torch_generate.py failed on $spec" >&2; rm -f "$OUT/generate.torch.$i.json"; }
  fi
  IFS=';'
done
IFS=$OLD_IFS

if [ -z "$REPORT_PY" ]; then
  echo "run_generate: no python3 to build the table; raw results:" >&2
  cat "$OUT"/generate.attnlab.*.json
  exit 0
fi
"$REPORT_PY" - "$OUT" "$i" <<'PY'
import json, os, sys

out, count = sys.argv[1], int(sys.argv[2])
def load(path):
    try:
        with open(path) as f:
            return json.load(f)["variants"][0]
    except (OSError, ValueError, IndexError, KeyError):
        return None
ours = [load(os.path.join(out, f"generate.attnlab.{i}.json")) for i in range(1, count + 1)]
theirs = [load(os.path.join(out, f"generate.torch.{i}.json")) for i in range(1, count + 1)]
env = os.environ
tokens, uncached, reps, threads = env["TOKENS"], env["UNCACHED_TOKENS"], env["REPS"], env["THREADS"]
dash = "—"
kind = {"mha": "KV cache", "talking_heads": "KV cache", "collaborative": "shared keys + V",
        "synthesizer": "V (dense logits from the new rows)", "local": "rolling window",
        "linear": "recurrent state", "performer": "recurrent state + key shift"}

def num(v):
    return dash if v is None else f"{v:.0f}" if v >= 100 else f"{v:.1f}"

def ratio(a, t):
    return dash if a is None or not t else f"{a / t:.2f}x"

lines = [f"### 7. Generation: the reference LM, batch 1, 1-token prompt, {tokens} new tokens cached, "
         f"{uncached} uncached, {threads} thread(s)", ""]
try:
    load_end = " ".join(open("/proc/loadavg").read().split()[:3])
except OSError:
    load_end = "?"
cores = os.cpu_count() or 1
lines.append(f"- tokens/s; cached: median of {reps} runs (the first one warms up); uncached: one run, "
             "the whole sequence recomputed for every token")
lines.append(f"- torch: {'torch_generate.py, the same layers and cache strategies written by hand' if any(theirs) else 'not available, attnlab-only numbers'}")
lines.append(f"- load average (1, 5, 15 min): {env.get('LOAD_START', '?')} before, {load_end} after")
try:
    if float(env.get("LOAD_START", "?").split()[0]) > 0.5 * cores:
        lines.append("- **warning: the machine was busy when the run started; the numbers (torch's most) are unreliable**")
except (ValueError, IndexError):
    pass
lines.append("- ratio = attnlab / torch (> 1: attnlab faster)")
lines += ["", "| attention | decoding state | cached attnlab | cached torch | ratio | uncached attnlab | uncached torch | ratio |",
          "|---|---|---:|---:|---:|---:|---:|---:|"]
for a, t in zip(ours, theirs):
    if a is None:
        continue
    name = a["attention"]
    ac, au = a["cached_tokens_per_s"], a["uncached_tokens_per_s"]
    tc, tu = (t["cached_tokens_per_s"], t["uncached_tokens_per_s"]) if t else (None, None)
    lines.append(f"| `{name}` | {kind.get(name.split('(')[0], '')} | {num(ac)} | {num(tc)} | {ratio(ac, tc)} "
                 f"| {num(au)} | {num(tu)} | {ratio(au, tu)} |")
if tokens == uncached:
    lines += ["", "Speed-up of the cache, attnlab: " + ", ".join(
        f"{a['attention'].split('(')[0]} {a['cached_tokens_per_s'] / a['uncached_tokens_per_s']:.1f}x" for a in ours if a)]
text = "\n".join(lines) + "\n"
sys.stdout.write("\n" + text)
path = os.path.join(out, "generate.md")
with open(path + ".tmp", "w") as f:
    f.write(text)
os.replace(path + ".tmp", path)
print(f"(written to {path})", file=sys.stderr)
PY
exit 0
