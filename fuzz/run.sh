#!/bin/sh
# fuzz/run.sh BUILD_DIR RUNS [NAME...]: runs each fuzz target (all by default) for RUNS executions,
# starting from its committed seed corpus fuzz/corpus/NAME (read, never written: new inputs go to
# BUILD_DIR/fuzz/work/NAME). A crash, sanitizer report, leak, timeout or unnamed error is saved in
# BUILD_DIR/fuzz/findings/NAME/; libFuzzer stops that target at its first finding. Prints one line
# per target (executions, seconds, findings) and exits 1 when any target has a finding.
set -u
build=$1
runs=$2
shift 2
targets=${*:-safetensors npy idx config sweep spec json}
src=$(cd "$(dirname "$0")" && pwd)
table=""
total=0
for t in $targets; do
  work=$build/fuzz/work/$t
  found=$build/fuzz/findings/$t
  log=$build/fuzz/$t.log
  mkdir -p "$work" "$found"
  echo "fuzz_$t: $runs runs (log: $log)"
  start=$(date +%s)
  "$build/fuzz/fuzz_$t" -runs="$runs" -timeout=10 -artifact_prefix="$found/" -print_final_stats=1 \
    "$work" "$src/corpus/$t" > "$log" 2>&1
  seconds=$(( $(date +%s) - start ))
  # The final stats when the run completes; else the last progress line's "#N".
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  [ -n "$execs" ] || execs=$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
  n=$(find "$found" -type f | wc -l)
  total=$((total + n))
  table="$table$(printf '%-18s %10s %8s %9s' "fuzz_$t" "${execs:-?}" "$seconds" "$n")
"
done
printf '\n%-18s %10s %8s %9s\n' target executions seconds findings
printf '%s' "$table"
if [ "$total" -gt 0 ]; then
  echo "findings are in $build/fuzz/findings/ (docs/fuzzing.md: turning a finding into a regression test)"
  exit 1
fi
