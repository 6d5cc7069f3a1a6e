#!/bin/sh
# bench/run_attention.sh BUILD_DIR: `make bench-attention`. The fused attention kernel at long
# sequence lengths against PyTorch 1.13's materialising attention, one layer core (B=1, h=8,
# dk=dv=64, float32, forward + backward), non-causal and causal, and the kernel's GFLOP/s as a
# fraction of the sgemm peak. Prints markdown tables and writes them to BUILD_DIR/bench/attention.md.
#
# Every (side, N) runs in a fresh process under a memory limit (RLIMIT_AS, set by the program
# itself) and a time limit (`timeout`), so a side that runs out says so in the table instead of
# taking the machine down. A side that ran out at some N is not run again at a larger N.
#
#   THREADS=N            thread count for both sides (default: ATTNLAB_NUM_THREADS, else every core)
#   LENGTHS="1024 ..."   sequence lengths (default 1024 2048 4096 8192 16384 32768)
#   MEMORY_LIMIT=GIB     address space per measurement (default 20)
#   TIME_LIMIT=SECONDS   wall time per measurement (default 900)
#   THROUGHPUT_LENGTHS   lengths of the GFLOP/s rows (default "4096 8192"; "" skips them)
#   MODULE=1             also time the nn::Attention module "mha" (projections included)
#   PYTHON               the python3 that has torch (default: the first of python3, /usr/bin/python3)
#   NO_TORCH=1           attnlab only
#
# Without python3-torch the attnlab numbers are printed alone. The script fails only if
# bench_attention cannot run at all, never because a side runs out or a target is missed.
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$BUILD/bench/bench_attention"
OUT="$BUILD/bench"
if [ ! -x "$BIN" ]; then
  echo "bench-attention: $BIN is missing; build it first (make bench-attention does, or cmake --build $BUILD --target bench_attention)" >&2
  exit 1
fi

THREADS=${THREADS:-${ATTNLAB_NUM_THREADS:-$(nproc)}}
LENGTHS=${LENGTHS:-1024 2048 4096 8192 16384 32768}
MEMORY_LIMIT=${MEMORY_LIMIT:-20}
TIME_LIMIT=${TIME_LIMIT:-900}
THROUGHPUT_LENGTHS=${THROUGHPUT_LENGTHS-4096 8192}
# One thread count everywhere, as in run.sh: attnlab's TBB arena, torch's OpenMP pool and the
# OpenBLAS pool torch's matmul uses. bench_attention sets OpenBLAS itself around its sgemm.
export ATTNLAB_NUM_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"

. "$HERE/common.sh"  # TORCH_PY, REPORT_PY, LOAD_START

export MEMORY_LIMIT TIME_LIMIT
echo "bench-attention: $THREADS thread(s), N = $LENGTHS, limits $MEMORY_LIMIT GiB and $TIME_LIMIT s per measurement, load average $LOAD_START" >&2
if [ -z "$TORCH_PY" ]; then
  echo "bench-attention: no python3 with torch (or NO_TORCH set): attnlab-only numbers" >&2
fi

SIDES="kernel"
[ -z "${MODULE:-}" ] || SIDES="$SIDES module"
[ -z "$TORCH_PY" ] || SIDES="$SIDES torch"
RESULTS="$OUT/attention.jsonl"
mkdir -p "$OUT"
: >"$RESULTS"

# measure SIDE N CAUSAL(0|1): runs one child, appends its JSON line (or one describing how it
# ended) to $RESULTS and echoes the status.
measure() {
  side=$1 n=$2 causal=$3
  flag=""
  [ "$causal" = 1 ] && flag="--causal"
  cjson=false
  [ "$causal" = 1 ] && cjson=true
  tmp="$OUT/attention.one.json"
  # shellcheck disable=SC2086
  case $side in
    kernel | module) timeout -k 10 "$TIME_LIMIT" "$BIN" --n "$n" $flag --path "$side" --memory-limit "$MEMORY_LIMIT" >"$tmp" ;;
    torch) timeout -k 10 "$TIME_LIMIT" "$TORCH_PY" "$HERE/torch_attention.py" --n "$n" $flag --threads "$THREADS" \
             --memory-limit "$MEMORY_LIMIT" >"$tmp" ;;
  esac
  rc=$?
  # Exit status: 0 ok, 3 out of memory (caught; the program printed its line), 124 the time
  # limit, 137 SIGKILL (the kernel's OOM killer, or `timeout -k`), anything else an error.
  case $rc in
    0 | 3) status=$(sed -n 's/.*"status": "\([a-z]*\)".*/\1/p' "$tmp") ;;
    124) status=time ;;
    137) status=killed ;;
    *) status=error ;;
  esac
  [ -n "$status" ] || status=error
  if [ "$rc" = 0 ] || [ "$rc" = 3 ]; then
    cat "$tmp" >>"$RESULTS"
  else
    echo "{\"side\": \"$side\", \"n\": $n, \"causal\": $cjson, \"status\": \"$status\", \"exit\": $rc}" >>"$RESULTS"
  fi
  rm -f "$tmp"
  echo "$status"
}

for causal in 0 1; do
  stopped=""  # sides that ran out at a shorter N: "side:status ..."
  for n in $LENGTHS; do
    for side in $SIDES; do
      prior=""
      for s in $stopped; do
        [ "${s%%:*}" = "$side" ] && prior=${s#*:}
      done
      cjson=false
      [ "$causal" = 1 ] && cjson=true
      if [ -n "$prior" ]; then
        echo "{\"side\": \"$side\", \"n\": $n, \"causal\": $cjson, \"status\": \"$prior\", \"skipped\": true}" >>"$RESULTS"
        continue
      fi
      echo "bench-attention: N=$n causal=$cjson $side ..." >&2
      status=$(measure "$side" "$n" "$causal")
      echo "bench-attention:   $status" >&2
      case $status in
        oom | time | killed) stopped="$stopped $side:$status" ;;
      esac
    done
  done
done

THROUGHPUT="$OUT/attention.throughput.json"
rm -f "$THROUGHPUT"
if [ -n "$THROUGHPUT_LENGTHS" ]; then
  echo "bench-attention: kernel throughput at N = $THROUGHPUT_LENGTHS" >&2
  if ! "$BIN" --throughput --lengths "$(echo $THROUGHPUT_LENGTHS | tr ' ' ',')" >"$THROUGHPUT.tmp"; then
    echo "bench-attention: the throughput run failed" >&2
    rm -f "$THROUGHPUT.tmp"
  else
    mv "$THROUGHPUT.tmp" "$THROUGHPUT"
  fi
fi

if [ -z "$REPORT_PY" ]; then
  echo "bench-attention: no python3 to build the tables; raw results:" >&2
  cat "$RESULTS"
  [ ! -f "$THROUGHPUT" ] || cat "$THROUGHPUT"
  exit 0
fi

"$REPORT_PY" - "$OUT" "$THREADS" <<'EOF'
# Joins the JSON lines of both sides into the markdown tables.
import json, os, sys, time

out, threads = sys.argv[1], sys.argv[2]
rows = [json.loads(line) for line in open(os.path.join(out, "attention.jsonl")) if line.strip()]
tp_path = os.path.join(out, "attention.throughput.json")
tp = json.load(open(tp_path)) if os.path.exists(tp_path) else None
sides = [s for s in ("kernel", "module", "torch") if any(r["side"] == s or r.get("path") == s for r in rows)]
has_torch = any(r["side"] == "torch" for r in rows)
lengths = sorted({r["n"] for r in rows})
torch_version = next((r["torch"] for r in rows if r.get("torch")), None)

def key(r):
    return "torch" if r["side"] == "torch" else r.get("path", r["side"])

table = {(key(r), r["n"], r["causal"]): r for r in rows}
names = {"kernel": "attnlab kernel", "module": "attnlab mha module", "torch": "torch"}
failed = {"oom": "out of memory", "time": "out of time", "killed": "killed (out of memory?)", "error": "error"}

def k(n):
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)

def cell_failed(r):
    return failed.get(r["status"], r["status"]) + (" *" if r.get("skipped") else "")

def cell_time(r):
    if r is None:
        return "—"
    return f"{r['seconds']:.3g} s" if r["status"] == "ok" else cell_failed(r)

def cell_rss(r):
    if r is None:
        return "—"
    return f"{r['max_rss_kib'] / 1024:.0f} MiB" if r["status"] == "ok" else cell_failed(r)

def ok(r):
    return r is not None and r["status"] == "ok"

lines = ["### Long sequences: the fused kernel against PyTorch's materialising attention", ""]
lines.append(f"- date: {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores visible, {threads} thread(s) each side")
lines.append(f"- torch: {torch_version or 'not run (no python3-torch, or NO_TORCH set): attnlab only'}")
lines.append(f"- limits per measurement: {os.environ.get('MEMORY_LIMIT')} GiB of address space (RLIMIT_AS), "
             f"{os.environ.get('TIME_LIMIT')} s; each in a fresh process")
try:
    load_end = " ".join(open("/proc/loadavg").read().split()[:3])
except OSError:
    load_end = "?"
lines.append(f"- load average (1, 5, 15 min): {os.environ.get('LOAD_START', '?')} before, {load_end} after")
lines.append("- time: median of the timed forward + backward steps after a warm-up (5 steps up to 2K, 3 up to 8K, "
             "then 1); memory: the process's peak RSS (ru_maxrss), libraries included")
for causal in (False, True):
    title = "causal" if causal else "non-causal"
    lines += ["", f"#### B=1, h=8, dk=dv=64, float32, {title}: time and peak RSS of forward + backward", ""]
    head = "| N |" + "".join(f" {names[s]} time |" for s in sides)
    if has_torch:
        head += " speed-up |"
    head += "".join(f" {names[s]} RSS |" for s in sides)
    if has_torch:
        head += " torch / attnlab RSS |"
    lines += [head, "|---:|" + "---:|" * (head.count("|") - 2)]
    for n in lengths:
        rs = {s: table.get((s, n, causal)) for s in sides}
        line = f"| {k(n)} |" + "".join(f" {cell_time(rs[s])} |" for s in sides)
        a, t = rs.get("kernel"), rs.get("torch")
        if has_torch:
            line += f" {t['seconds'] / a['seconds']:.2f}x |" if ok(a) and ok(t) else " — |"
        line += "".join(f" {cell_rss(rs[s])} |" for s in sides)
        if has_torch:
            line += f" {t['max_rss_kib'] / a['max_rss_kib']:.1f}x |" if ok(a) and ok(t) else " — |"
        lines.append(line)
    if has_torch:
        lines += ["", "speed-up = torch's time / attnlab kernel's time (> 1: attnlab faster)."]
    if any(r.get("skipped") for r in rows if r["causal"] == causal):
        lines.append("\\* not run: that side ran out at a shorter N.")

if tp:
    peak = tp["sgemm_gflops"]
    lines += ["", f"#### Kernel throughput: attnlab tile_attention against the sgemm peak ({tp['threads']} thread(s))", ""]
    lines.append(f"Peak: `cblas_sgemm` 2048x2048x2048 in the same process, OpenBLAS at {tp['threads']} thread(s): "
                 f"**{peak:.1f} GFLOP/s** ({tp['blas']}). FLOPs: forward 4·N·M·dk·h, forward + backward 3.5x that "
                 "(FlashAttention-2's count); causal counts the allowed pairs only, N(N+1)/2.")
    lines += ["", "| N | causal | pass | time | GFLOP/s | of sgemm peak | target | met |",
              "|---:|---|---|---:|---:|---:|---|---|"]
    met = total = 0
    for r in tp["rows"]:
        for label, s, g in (("forward", r["forward_seconds"], r["forward_gflops"]),
                            ("forward + backward", r["step_seconds"], r["step_gflops"])):
            frac = g / peak
            total += 1
            met += frac >= 0.5
            shown = f"{100 * frac:.0f}%" if round(100 * frac) != 50 or frac >= 0.5 else f"{100 * frac:.1f}%"
            lines.append(f"| {k(r['n'])} | {'yes' if r['causal'] else 'no'} | {label} | {s:.3g} s | {g:.1f} | "
                         f"{shown} | ≥ 50% | {'yes' if frac >= 0.5 else '**no**'} |")
    lines += ["", f"**{met} of {total} throughput targets met.**"]

text = "\n".join(lines) + "\n"
sys.stdout.write(text)
path = os.path.join(out, "attention.md")
with open(path + ".tmp", "w") as f:
    f.write(text)
os.replace(path + ".tmp", path)
print(f"(written to {path})", file=sys.stderr)
EOF
exit 0
