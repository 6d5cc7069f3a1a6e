#!/bin/sh
# bench/run.sh BUILD_DIR: `make bench`. Runs bench_ops (attnlab, and OpenBLAS called directly)
# and bench/torch_ops.py (the same work in PyTorch) on the same thread count, then prints one
# markdown table of ratios against the targets and writes it to BUILD_DIR/bench/report.md.
#
#   THREADS=N     thread count for both (default: ATTNLAB_NUM_THREADS, else every core);
#                 THREADS=1 gives the single-thread comparison
#   ROUNDS=R      alternate the two programs R times and keep each number's best round
#                 (default 1; more rounds damp the noise of a shared machine)
#   BENCH_ARGS    extra arguments for both programs, e.g. "--reps 5 --min-time 0.02"
#   BENCH_GROUPS  which groups to run (default "matmul elementwise overhead mlp")
#   PYTHON        the python3 that has torch (default: the first of python3, /usr/bin/python3)
#   NO_TORCH=1    skip torch_ops.py: attnlab and OpenBLAS numbers only
#
# Without python3-torch the attnlab numbers are still printed, marked as having no reference.
# This script never fails because a target is missed; only a crash of bench_ops fails it.
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$BUILD/bench/bench_ops"
OUT="$BUILD/bench"
if [ ! -x "$BIN" ]; then
  echo "bench: $BIN is missing; build it first (make bench does, or cmake --build $BUILD --target bench_ops)" >&2
  exit 1
fi

THREADS=${THREADS:-${ATTNLAB_NUM_THREADS:-$(nproc)}}
ROUNDS=${ROUNDS:-1}
BENCH_ARGS=${BENCH_ARGS:-}
BENCH_GROUPS=${BENCH_GROUPS:-matmul elementwise overhead mlp}
# One thread count for everything: attnlab's TBB arena, torch's intra-op pool (OpenMP), and
# the OpenBLAS pool that torch_ops.py's matmul uses. bench_ops sets OpenBLAS itself.
export ATTNLAB_NUM_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS"

. "$HERE/common.sh"  # TORCH_PY, REPORT_PY, LOAD_START

# Other processes on the machine distort every number, torch's OpenMP pool most (its threads
# spin-wait for each other); the report records the load average before and after.
echo "bench: $THREADS thread(s), $ROUNDS round(s), load average $LOAD_START" >&2
if [ -n "${NO_TORCH:-}" ]; then
  echo "bench: NO_TORCH set: attnlab-only numbers" >&2
elif [ -z "$TORCH_PY" ]; then
  echo "bench: python3-torch not found: printing attnlab-only numbers (install python3-torch for the comparison)" >&2
fi

# The two programs alternate group by group, so that both sides of a comparison are measured
# within seconds of each other, whatever else the machine is doing meanwhile.
rm -f "$OUT"/attnlab.*.json "$OUT"/torch.*.json
r=1
while [ "$r" -le "$ROUNDS" ]; do
  for g in $BENCH_GROUPS; do
    echo "bench: round $r/$ROUNDS, $g: attnlab (bench_ops)" >&2
    # shellcheck disable=SC2086
    if ! "$BIN" --only "$g" $BENCH_ARGS >"$OUT/attnlab.$r.$g.json"; then
      echo "bench: bench_ops failed" >&2
      exit 1
    fi
    if [ -n "$TORCH_PY" ]; then
      echo "bench: round $r/$ROUNDS, $g: torch (torch_ops.py)" >&2
      # shellcheck disable=SC2086
      OPENBLAS_NUM_THREADS="$THREADS" "$TORCH_PY" "$HERE/torch_ops.py" --threads "$THREADS" --only "$g" $BENCH_ARGS \
        >"$OUT/torch.$r.$g.json" || { echo "bench: torch_ops.py failed; no torch numbers" >&2; rm -f "$OUT/torch.$r.$g.json"; }
    fi
  done
  r=$((r + 1))
done

if [ -z "$REPORT_PY" ]; then
  echo "bench: no python3 to build the table; raw attnlab results:" >&2
  cat "$OUT"/attnlab.*.json
  exit 0
fi

"$REPORT_PY" - "$OUT" <<'EOF'
# Joins bench_ops's rows with torch_ops.py's results into the markdown report.
import glob, json, os, platform, sys, time

out = sys.argv[1]
ours = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "attnlab.*.json")))]
theirs = []
for p in sorted(glob.glob(os.path.join(out, "torch.*.json"))):
    try:
        theirs.append(json.load(open(p)))
    except ValueError:
        pass

def best(values, higher):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return max(values) if higher else min(values)

# One row per label, in the order first seen; each number is its best round.
rows, seen = [], {}
for o in ours:
    for row in o["rows"]:
        if row["label"] not in seen:
            seen[row["label"]] = dict(row, attnlab=[], ref=[])
            rows.append(seen[row["label"]])
        seen[row["label"]]["attnlab"].append(row["attnlab"])
        seen[row["label"]]["ref"].append(row["ref"])
for r in rows:
    hb = r["higher_is_better"]
    r["attnlab"], r["ref"] = best(r["attnlab"], hb), best(r["ref"], hb)
    r["torch"] = best([t["results"].get(r["torch_key"]) for t in theirs], hb) if r["torch_key"] else None

def fmt(v):
    if v is None:
        return "—"
    a = abs(v)
    return f"{v:.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}" if a >= 0.1 or a == 0 else f"{v:.3f}"

def ratio(r, ref):
    if ref is None or r["attnlab"] in (None, 0) or ref == 0:
        return None
    return r["attnlab"] / ref if r["higher_is_better"] else ref / r["attnlab"]

met_count = total = unchecked = 0
def verdict(ok):
    global met_count, total
    total += 1
    met_count += ok
    return "yes" if ok else "**no**"

sections = [
    ("matmul", "1. Matrix products: attnlab `matmul` vs `cblas_sgemm` called directly (same binary, same threads)"),
    ("elementwise", "2. Elementwise, reductions, softmax on 2048x2048 float32 (4M elements): attnlab vs torch"),
    ("overhead", "3. Per-op overhead on 4-element tensors: attnlab vs torch (time per op, lower is better)"),
    ("mlp", "4. MLP training step: attnlab vs torch"),
    ("alloc", "5. Heap allocations per steady-state training step (attnlab's caching allocator)"),
]
threads = ours[0]["threads"]
cpu = platform.processor() or platform.machine()
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
except OSError:
    pass
lines = ["# attnlab benchmark report", ""]
lines.append(f"- date: {time.strftime('%Y-%m-%d %H:%M')}, CPU: {cpu}, {os.cpu_count()} cores visible")
lines.append(f"- threads: {threads} (ATTNLAB_NUM_THREADS, torch.set_num_threads, openblas_set_num_threads)")
lines.append(f"- OpenBLAS: {ours[0].get('blas', '?')}")
if theirs:
    lines.append(f"- torch: {theirs[0]['torch']} ({theirs[0]['threads']} thread(s))")
else:
    why = "NO_TORCH set" if os.environ.get("NO_TORCH") else "python3-torch missing"
    lines.append(f"- torch: **not available** ({why}): attnlab-only numbers, no torch ratios")
rounds = len({os.path.basename(p).split(".")[1] for p in glob.glob(os.path.join(out, "attnlab.*.json"))})
lines.append(f"- rounds: {rounds}, the two programs alternating group by group (each number: median of "
             "repetitions; best round kept)")
try:
    load_end = " ".join(open("/proc/loadavg").read().split()[:3])
except OSError:
    load_end = "?"
load_start = os.environ.get("LOAD_START", "?")
lines.append(f"- load average (1, 5, 15 min): {load_start} before, {load_end} after")
try:
    if float(load_start.split()[0]) > 0.5 * (os.cpu_count() or 1):
        lines.append("- **warning: the machine was busy when the run started; numbers (torch's most) are unreliable**")
except (ValueError, IndexError):
    pass
lines.append("- ratio = attnlab's speed-up over the reference (> 1: attnlab faster), for rates and for times")
for group, title in sections:
    grp = [r for r in rows if r["group"] == group]
    if not grp:
        continue
    lines += ["", f"### {title}", "", "| measurement | unit | attnlab | reference | ratio | target | met |",
              "|---|---|---:|---:|---:|---|---|"]
    info = []
    for r in grp:
        if r["ref_name"] == "OpenBLAS":
            ref, ref_name = r["ref"], "OpenBLAS"
            if r["torch"] is not None:
                info.append(r)
        elif r["ref_name"] == "torch":
            ref, ref_name = r["torch"], "torch"
        else:
            ref, ref_name = None, ""
        q = ratio(r, ref)
        if r["min_ratio"] is not None:
            target = f"≥ {r['min_ratio']:g}x"
            if q is not None:
                met = verdict(q >= r["min_ratio"])
            else:
                met, unchecked = "n/a (no reference)", unchecked + 1
        elif r["max_value"] is not None:
            target = f"≤ {r['max_value']:g}"
            met = verdict(r["attnlab"] <= r["max_value"])
        else:
            target, met = "(info)", ""
        ref_cell = f"{fmt(ref)} ({ref_name})" if ref is not None else "—"
        qcell = "—"
        if q is not None:
            qcell = f"{q:.2f}"
            if r["min_ratio"] is not None and float(qcell) >= r["min_ratio"] > q:
                qcell = f"{q:.3f}"  # do not round a miss up to the target
            qcell += "x"
        lines.append(f"| {r['label']} | {r['unit']} | {fmt(r['attnlab'])} | {ref_cell} | {qcell} | {target} | {met} |")
    for r in info:
        q = ratio(r, r["torch"])
        lines.append(f"| {r['label']}, vs torch.matmul | {r['unit']} | {fmt(r['attnlab'])} | {fmt(r['torch'])} (torch) "
                     f"| {q:.2f}x | (info) | |")
summary = f"**{met_count} of {total} targets met.**"
if unchecked:
    summary += f" ({unchecked} not checked: no reference numbers.)"
lines += ["", summary]
text = "\n".join(lines) + "\n"
sys.stdout.write(text)
with open(os.path.join(out, "report.md"), "w") as f:
    f.write(text)
print(f"(written to {os.path.join(out, 'report.md')})", file=sys.stderr)
EOF
exit 0
