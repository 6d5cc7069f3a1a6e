#!/bin/bash
# `make test-slurm`: `attnlab sweep --emit-slurm` job arrays under the real single-node Slurm of
# scripts/slurm/local_cluster.sh (docs/sweeps.md, "A local Slurm cluster"). Not part of `make test`.
#
#   scripts/slurm/test_slurm.sh [BUILD_DIR]      (default build; needs BUILD_DIR/attnlab, root)
#
# 1. A small sweep (6 runs of the `example` experiment, 3 shards of 1 CPU each, so two tasks share
#    the sweep directory at once and the third waits for a CPU) through sbatch; then
#    `attnlab report` must hold every run.
# 2. Requeue: 3 runs long enough to interrupt. Mid-run, task 0 is requeued by Slurm (`scontrol
#    requeue`: SIGTERM to the job) and task 1 gets the time-limit warning (SIGUSR1, as
#    `--signal=B:USR1@120` sends it), after which the script requeues itself. Every run must end
#    complete with each metrics.jsonl step exactly once, in order, and results.sqlite/csv one
#    row per run.
# Prints one PASS or FAIL line per check and the measured times; exits 1 if any check failed.
# The sweeps live in $ATTNLAB_SLURM_TEST_DIR (default /tmp/attnlab-slurm-test), under a directory
# name with a space, so the quoting of the emitted script is exercised too.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd) || exit 2
attnlab=$build/attnlab
[ -x "$attnlab" ] || { echo "FAIL $attnlab not built (make cli)"; exit 2; }
work="${ATTNLAB_SLURM_TEST_DIR:-/tmp/attnlab-slurm-test}/with space"
# Steps of each requeue-check run: long enough to interrupt (6 s on an idle core, minutes on a loaded one).
long_steps=${ATTNLAB_SLURM_TEST_STEPS:-3000}
timeout=${ATTNLAB_SLURM_TEST_TIMEOUT:-900}

failures=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
check() {  # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}

"$here/local_cluster.sh" start || { echo "FAIL the local cluster did not start"; exit 1; }
eval "$("$here/local_cluster.sh" env)"
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 2

# Requeued tasks are held by Slurm for about two minutes (BeginTime) before they may start again;
# releasing them at once keeps the test short without changing what is tested.
release_requeued() {
  squeue -h -j "$1" -t PD -o '%i %r' 2>/dev/null | while read -r id reason; do
    [ "$reason" = BeginTime ] && scontrol update JobId="$id" StartTime=now
  done
}

# Waits until no task of array $1 is pending or running; fails after $timeout seconds.
wait_array() {
  local start=$SECONDS
  while [ -n "$(squeue -h -j "$1" 2>/dev/null)" ]; do
    release_requeued "$1"
    if [ $((SECONDS - start)) -gt "$timeout" ]; then
      fail "array $1 still queued or running after $timeout s"
      scancel "$1"
      return 1
    fi
    sleep 1
  done
}

# The JobState of every task of array $1, one per line "TASK STATE EXITCODE RESTARTS".
task_states() {
  scontrol -o show job "$1" | sed -E 's/.*ArrayTaskId=([0-9]+).*JobState=([A-Z_]+).*Restarts=([0-9]+).*ExitCode=([0-9:]+).*/\1 \2 \4 \3/' | sort -n
}

all_completed() {  # all_completed ARRAY TASKS
  [ "$(task_states "$1" | awk '$2 == "COMPLETED" && $3 == "0:0"' | wc -l)" = "$2" ]
}

# Checks of a finished, reported sweep directory, in python3 (JSON and SQLite): prints PASS/FAIL.
check_sweep_dir() {  # check_sweep_dir DIR RUNS STEPS LOG_EVERY
  python3 - "$@" <<'EOF'
import csv, json, os, sqlite3, sys
d, runs, steps, log_every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
bad = 0
def check(ok, what):
    global bad
    print(("PASS " if ok else "FAIL ") + what)
    bad += not ok
want_steps = list(range(log_every, steps + 1, log_every))
for i in range(runs):
    rd = os.path.join(d, "runs", f"{i:04d}")
    summary = os.path.join(rd, "summary.json")
    ok = os.path.exists(summary) and json.load(open(summary))["steps"] == steps
    check(ok, f"run {i:04d} complete at step {steps}")
    got = [json.loads(line)["step"] for line in open(os.path.join(rd, "metrics.jsonl"))]
    check(got == want_steps, f"run {i:04d} metrics.jsonl: steps {log_every}..{steps} each once, in order "
          f"({len(got)} lines, {len(set(got))} distinct, {len(want_steps)} expected)")
db = sqlite3.connect(os.path.join(d, "results.sqlite"))
rows = db.execute("SELECT id, status, steps FROM runs ORDER BY id").fetchall()
check(rows == [(i, "complete", steps) for i in range(runs)], f"results.sqlite: one complete row per run ({len(rows)} rows)")
curve = db.execute("SELECT run_id, count(*), count(DISTINCT step) FROM curves WHERE name = 'train_loss' GROUP BY run_id").fetchall()
check(curve == [(i, len(want_steps), len(want_steps)) for i in range(runs)],
      "results.sqlite curves: every run's train_loss once per logged step")
table = list(csv.DictReader(open(os.path.join(d, "results.csv"))))
check([r["id"] for r in table] == [str(i) for i in range(runs)] and all(r["status"] == "complete" for r in table),
      f"results.csv: one complete row per run ({len(table)} rows)")
sys.exit(1 if bad else 0)
EOF
}

# ---- 1. a small sweep through sbatch ----
cat >small.toml <<'EOF'
# make test-slurm: 6 short runs in 3 shards.
experiment = "example"
seeds = [0, 1, 2]
[set]
"train.steps" = 300
[grid]
"train.lr" = [0.003, 0.01]
EOF
"$attnlab" sweep small.toml --out "$work/small sweep" --emit-slurm --shards 3 --cpus-per-task 1 >/dev/null
check "emit-slurm wrote small sweep/sweep.sbatch" test -f "$work/small sweep/sweep.sbatch"
t0=$SECONDS
small=$(cd / && sbatch --parsable "$work/small sweep/sweep.sbatch")
echo "submitted array $small (small sweep: 6 runs, 3 shards)"
wait_array "$small"
small_seconds=$((SECONDS - t0))
check "small sweep: all 3 array tasks COMPLETED with exit 0" all_completed "$small" 3
task_states "$small" | sed 's/^/  task /'
"$attnlab" report "$work/small sweep" >/dev/null
check "attnlab report on the small sweep" test -f "$work/small sweep/report.md"
check_sweep_dir "$work/small sweep" 6 300 10 || failures=$((failures + 1))
# report.md: one row per learning rate, each over the 3 seeds.
check "report.md: both configurations with n = 3" \
  test "$(grep -cE '^\| `0\.0(03|1)` \| 3 \|' "$work/small sweep/report.md")" = 2
# Two shards worked in one directory at once: each task's start note precedes the other's end note.
overlap() {
  local s0 e0 s1 e1
  s0=$(grep -m1 ' shard 0/3' "$work/small sweep/shards/slurm-${small}_0.out" | grep -oE '[0-9T:-]+Z$')
  e0=$(grep 'sweep exit status' "$work/small sweep/shards/slurm-${small}_0.out" | tail -1 | grep -oE '[0-9T:-]+Z$')
  s1=$(grep -m1 ' shard 1/3' "$work/small sweep/shards/slurm-${small}_1.out" | grep -oE '[0-9T:-]+Z$')
  e1=$(grep 'sweep exit status' "$work/small sweep/shards/slurm-${small}_1.out" | tail -1 | grep -oE '[0-9T:-]+Z$')
  [ -n "$s0" ] && [ -n "$e1" ] && [[ ! "$e1" < "$s0" ]] && [[ ! "$e0" < "$s1" ]]
}
check "shards 0 and 1 ran in the sweep directory at the same time (their locks do not block each other)" overlap
echo "TIME small sweep array (6 runs x 300 steps, 3 shards on 2 CPUs): ${small_seconds} s from sbatch to the last task's end"

# ---- 2. requeue mid-run ----
cat >long.toml <<EOF
# make test-slurm: 3 runs long enough to interrupt (checkpoints only on stop and at the end).
experiment = "example"
seeds = [0, 1, 2]
[set]
"train.steps" = $long_steps
EOF
long_dir="$work/long sweep"
"$attnlab" sweep long.toml --out "$long_dir" --emit-slurm --shards 3 --cpus-per-task 1 >/dev/null
t0=$SECONDS
long=$(cd / && sbatch --parsable "$long_dir/sweep.sbatch")
echo "submitted array $long (requeue check: 3 runs x $long_steps steps, 3 shards)"

last_step() { tail -1 "$long_dir/runs/$1/metrics.jsonl" 2>/dev/null | grep -oE '"step":[0-9]+' | grep -oE '[0-9]+'; }
# Wait until runs 0 and 1 (shards 0 and 1, running side by side) are a fifth of the way in.
under_way() {
  local a b
  a=$(last_step 0000)
  b=$(last_step 0001)
  [ -n "$a" ] && [ -n "$b" ] && [ "$a" -ge $((long_steps / 5)) ] && [ "$b" -ge $((long_steps / 5)) ]
}
start=$SECONDS
until under_way || [ $((SECONDS - start)) -gt "$timeout" ]; do sleep 0.5; done
before0=$(last_step 0000)
before1=$(last_step 0001)
scontrol requeue "${long}_0"
scancel --batch --signal=USR1 "${long}_1"
echo "requeued task 0 at step ~$before0 of run 0000; SIGUSR1 to task 1 at step ~$before1 of run 0001"
wait_array "$long"
long_seconds=$((SECONDS - t0))
check "requeue sweep: all 3 array tasks COMPLETED with exit 0" all_completed "$long" 3
task_states "$long" | sed 's/^/  task /'
check "task 0 (scontrol requeue) and task 1 (SIGUSR1, self-requeue) each restarted once" \
  test "$(task_states "$long" | awk '$1 < 2 { print $4 }' | tr '\n' ' ')" = "1 1 "
for r in 0 1; do
  run=$(printf '%04d' $r)
  out="$long_dir/runs/$run/stdout.txt"
  stopped=$(grep -oE 'stopped at step [0-9]+' "$out" | grep -oE '[0-9]+$' | head -1)
  resumed=$(grep -oE 'from step [0-9]+' "$out" | grep -oE '[0-9]+$' | head -1)
  check "run $run stopped with a checkpoint and resumed from it (stopped at ${stopped:-?}, resumed from ${resumed:-?})" \
    test -n "$stopped" -a "$stopped" = "${resumed:-x}"
  echo "TIME run $run: stopped at step ${stopped:-?}, resumed from step ${resumed:-?}: $(( ${stopped:-0} - ${resumed:-0} )) steps redone"
done
self_requeued() {
  local log="$long_dir/shards/slurm-${long}_1.out"
  grep -q 'SIGUSR1 (time limit near): stopping' "$log" && grep -q 'sweep exit status 3' "$log" &&
    grep -q 'requeueing' "$log" && grep -q 'restart 1' "$log"
}
check "task 1's log: SIGUSR1, sweep exit status 3, requeueing, then restart 1" self_requeued
"$attnlab" report "$long_dir" >/dev/null
check_sweep_dir "$long_dir" 3 "$long_steps" 10 || failures=$((failures + 1))
echo "TIME requeue sweep array (3 runs x $long_steps steps, 2 interrupted and requeued): ${long_seconds} s"

echo
if [ "$failures" = 0 ]; then
  echo "test-slurm: PASS (every check)"
else
  echo "test-slurm: FAIL ($failures failed checks)"
  exit 1
fi
