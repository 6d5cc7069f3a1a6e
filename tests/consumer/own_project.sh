#!/bin/sh
# examples/own-project as its user builds it: installs this build tree into BUILD/own_project/prefix,
# configures and builds the example against it with find_package(attnlab), then checks that its
# program `own` lists the project's variant beside the built-in ones, passes the conformance suite
# on it (`own check`), speaks as `own` in its help and errors, runs the project's experiment to a
# complete run, and runs and reports the project's sweep (2 configs x 1 seed).
# Usage: own_project.sh SOURCE_DIR BUILD_DIR [BUILD_TYPE] [EXTRA_FLAGS]
# With ATTNLAB_PREFIX set, the example builds against the attnlab installed there instead (the
# Debian package's test, scripts/package/test_package.sh), in BUILD_DIR/own_project.
set -e
src="$1"
work="$2/own_project"
mkdir -p "$work"
rm -rf "$work/prefix" "$work/runs" "$work/sweep"
prefix="${ATTNLAB_PREFIX:-$work/prefix}"
[ -n "$ATTNLAB_PREFIX" ] || cmake --install "$2" --prefix "$prefix" >/dev/null
cmake -S "$src/examples/own-project" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE="${3:-Release}" ${4:+-DCMAKE_CXX_FLAGS="$4"} ${4:+-DCMAKE_EXE_LINKER_FLAGS="$4"} >/dev/null
cmake --build "$work/build" -j 2 >/dev/null
own="$work/build/own"

check() {  # check MESSAGE COMMAND...: runs the command, failing with MESSAGE when it fails
  msg="$1"
  shift
  "$@" || { echo "own-project: $msg" >&2; exit 1; }
}

"$own" variants > "$work/variants.txt"
check "'own variants' does not list cosine" grep -q '^cosine' "$work/variants.txt"
check "'own variants' does not list mha" grep -q '^mha' "$work/variants.txt"
"$own" check "cosine(heads=2)" > "$work/check.txt" 2>&1 || { cat "$work/check.txt" >&2; echo "own-project: 'own check cosine(heads=2)' fails" >&2; exit 1; }
check "'own check' printed no summary" grep -q '^cosine(heads=2): [0-9]* checks passed, 0 failed' "$work/check.txt"
"$own" --help > "$work/help.txt"
check "'own --help' does not call itself own" grep -q '^Usage: [^ ]*own ' "$work/help.txt"
"$own" check "cosine(heads=2" > "$work/error.txt" 2>&1 && { echo "own-project: a bad spec passes 'own check'" >&2; exit 1; }
check "'own check' errors do not start with 'own check:'" grep -q '^own check: ' "$work/error.txt"
"$own" run no_such_experiment > "$work/error.txt" 2>&1 && { echo "own-project: 'own run no_such_experiment' passes" >&2; exit 1; }
check "'own run' errors do not start with 'own run:'" grep -q '^own run: ' "$work/error.txt"
"$own" list > "$work/list.txt"
check "'own list' lacks cosine_recall" grep -q 'cosine_recall' "$work/list.txt"
check "'own list' lacks the built-in example" grep -q '^  example' "$work/list.txt"

"$own" run cosine_recall --preset tiny --run-dir "$work/runs/cosine" > "$work/run.txt" 2>&1
check "the run is not complete" grep -q '"status": "complete"' "$work/runs/cosine/summary.json"
check "the run's config is not cosine" grep -q 'attention = "cosine(heads=2)"' "$work/runs/cosine/config.toml"

"$own" sweep "$src/examples/own-project/sweeps/cosine_vs_mha.toml" --out "$work/sweep" > "$work/sweep.txt" 2>&1
"$own" report "$work/sweep" > "$work/report.txt" 2>&1
check "results.csv does not have 2 complete runs" test "$(grep -c ',complete,' "$work/sweep/results.csv")" = 2
check "report.md does not name cosine" grep -q 'cosine(heads=2)' "$work/sweep/report.md"
check "report.md does not name mha" grep -q 'mha(heads=2)' "$work/sweep/report.md"
echo "own-project: variants, run, sweep and report ok"
