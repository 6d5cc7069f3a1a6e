#!/bin/sh
# bench/run_gpt2.sh BUILD_DIR: GPT-2 small's training step (124M parameters, 12 layers, d=768,
# 12 heads, vocabulary 50,257, batch 4 x 64 random tokens, AdamW; docs/performance.md, "GPT-2
# small"), attnlab (bench_lm --gpt2-small) against PyTorch (torch_lm.py --gpt2-small), the LM head
# tied to the token embedding and untied, in one run. The four programs alternate (attnlab tied,
# torch tied, attnlab untied, torch untied, then again) so every column is measured under the
# same load. Prints one markdown table, also written to BUILD_DIR/bench/gpt2.md:
#   - step seconds: the median of each run's STEPS steps, and the range of those medians over
#     the rounds
#   - opt.step() seconds (AdamW over the parameters), median
#   - with PERF=1: the share of the steady-state CPU samples in OpenBLAS (sgemm and its packing
#     copies), one extra `perf record` of each attnlab configuration (bench_lm --mark gives the
#     second at which the timed steps start, so warm-up and initialisation are left out)
#
#   THREADS=N   threads on both sides (default 2, the setting of llm.c's figure in the doc)
#   STEPS=S     timed steps per run after 2 warm-up steps (default 5)
#   ROUNDS=R    alternating rounds (default 3)
#   PERF=1      also measure the BLAS share (needs perf)
#   NO_TORCH=1  attnlab-only numbers
# llm.c's train_gpt2.c is not built here: its figure in docs/performance.md is quoted.
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT="$BUILD/bench"
THREADS=${THREADS:-2}
STEPS=${STEPS:-5}
ROUNDS=${ROUNDS:-3}
if [ ! -x "$BUILD/bench/bench_lm" ]; then
  echo "run_gpt2: $BUILD/bench/bench_lm is missing; build it first (cmake --build $BUILD --target bench_lm)" >&2
  exit 1
fi
. "$HERE/common.sh"  # TORCH_PY, REPORT_PY, LOAD_START
[ -n "$REPORT_PY" ] || { echo "run_gpt2: needs a python3 to build the table" >&2; exit 1; }
[ -n "$TORCH_PY" ] || echo "run_gpt2: python3-torch not found (or NO_TORCH set): attnlab-only numbers" >&2
export ATTNLAB_NUM_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"

results=""
add() { results="$results
$1 $2"; }
round=1
while [ "$round" -le "$ROUNDS" ]; do
  for untied in "" "--untied"; do
    echo "run_gpt2: round $round of $ROUNDS, attnlab $untied" >&2
    r=$("$BUILD/bench/bench_lm" "$STEPS" --gpt2-small $untied) || { echo "run_gpt2: bench_lm failed" >&2; exit 1; }
    add attnlab "$r"
    if [ -n "$TORCH_PY" ]; then
      echo "run_gpt2: round $round of $ROUNDS, torch $untied" >&2
      r=$("$TORCH_PY" "$HERE/torch_lm.py" "$STEPS" "$THREADS" --gpt2-small $untied) && add torch "$r" ||
        echo "run_gpt2: torch_lm.py failed; no torch numbers" >&2
    fi
  done
  round=$((round + 1))
done

# blas_share ARGS: the percentage of the steady-state samples of bench_lm ARGS in libopenblas.
blas_share() {
  data=$(mktemp)
  mark=$(perf record -q -k CLOCK_MONOTONIC -o "$data" "$BUILD/bench/bench_lm" "$STEPS" --gpt2-small --mark "$@" 2>&1 >/dev/null |
         sed -n 's/^bench_lm: timed steps start at //p')
  perf report -q -i "$data" --time "$mark," --sort dso 2>/dev/null |
    awk '/libopenblas/ { gsub("%", "", $1); s += $1 } END { printf "%.1f", s }'
  rm -f "$data"
}
share_tied="" share_untied=""
if [ "${PERF:-0}" = 1 ]; then
  if command -v perf >/dev/null 2>&1; then
    echo "run_gpt2: perf record, tied and untied" >&2
    share_tied=$(blas_share)
    share_untied=$(blas_share --untied)
  else
    echo "run_gpt2: PERF=1 but no perf: no BLAS share" >&2
  fi
fi

mkdir -p "$OUT"
"$REPORT_PY" - "$OUT" "$THREADS" "$STEPS" "$ROUNDS" "$results" "$share_tied" "$share_untied" <<'PY'
import json, os, statistics, sys

out, threads, steps, rounds, results, share_tied, share_untied = sys.argv[1:8]
runs = {}
for line in results.splitlines():
    if not line.strip():
        continue
    side, js = line.split(" ", 1)
    r = json.loads(js)
    runs.setdefault((side, r["model"]), []).append(r)
shares = {"gpt2-small": share_tied, "gpt2-small-untied": share_untied}
rows = []
for model, head in (("gpt2-small", "tied"), ("gpt2-small-untied", "untied")):
    for side in ("attnlab", "torch"):
        rs = runs.get((side, model))
        if not rs:
            continue
        steps_s = sorted(r["step_ms"] / 1e3 for r in rs)
        adam_s = statistics.median(r["adam_ms"] / 1e3 for r in rs)
        share = shares[model] if side == "attnlab" and shares[model] else "—"
        rows.append(f"| {side} | {head} | {rs[0]['params']:,} | {statistics.median(steps_s):.2f} | "
                    f"{steps_s[0]:.2f}-{steps_s[-1]:.2f} | {adam_s:.2f} | {share} |")
try:
    load_end = " ".join(open("/proc/loadavg").read().split()[:3])
except OSError:
    load_end = "?"
lines = ["### GPT-2 small training step (12 layers, d 768, 12 heads, vocabulary 50,257, batch 4 x 64, AdamW), "
         f"{threads} thread(s)", "",
         f"- {rounds} alternating rounds of {steps} timed steps after 2 warm-up steps; a cell is the median over "
         "the rounds of each run's median step, the range is that of the rounds",
         f"- load average (1, 5, 15 min): {os.environ.get('LOAD_START', '?')} before, {load_end} after",
         "- BLAS share: the steady-state CPU samples of `perf record` in libopenblas (PERF=1)", "",
         "| program | LM head | parameters | step (s) | range (s) | opt.step() (s) | BLAS share (%) |",
         "|---|---|---:|---:|---:|---:|---:|"] + rows
text = "\n".join(lines) + "\n"
sys.stdout.write("\n" + text)
path = os.path.join(out, "gpt2.md")
with open(path + ".tmp", "w") as f:
    f.write(text)
os.replace(path + ".tmp", path)
print(f"(written to {path})", file=sys.stderr)
PY
