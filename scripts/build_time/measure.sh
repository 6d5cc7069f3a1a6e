#!/bin/sh
# Cold build cost in CPU seconds, per target and per translation unit (docs/testing.md, "Build
# time"). Configures BUILD_DIR (a fresh directory) without ccache, compiles TARGET... through
# tu_time.sh and prints the CPU seconds of the whole build (user + system of every compiler and
# linker), then the sum per target and the ten costliest translation units.
#   sh scripts/build_time/measure.sh /tmp/bt attnlab_cli
# On a loaded machine CPU seconds stay comparable where wall-clock times do not; on an idle
# 2-core machine the wall time of a build is about its CPU seconds / 2 plus the final links.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR TARGET..." >&2; exit 2; }
build=$1; shift
src=$(cd "$(dirname "$0")/../.." && pwd)
log=$build/tu_times.txt
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DATTNLAB_CCACHE=OFF \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$src/scripts/build_time/tu_time.sh" > "$build.configure.txt"
rm -f "$log"
CCACHE_DISABLE=1 ATTNLAB_TU_LOG=$log /usr/bin/time -o "$build/total.txt" -f "%U %S %e" \
  cmake --build "$build" -j "$(nproc)" --target "$@" > "$build/build.txt"
awk '{printf "build: %.1f CPU s (user %.1f + system %.1f), %.0f s wall\n", $1 + $2, $1, $2, $3}' "$build/total.txt"
awk '{t = $1 + $2; n = split($3, p, ".dir/"); k = p[1]; sub(".*/", "", k); s[k] += t; c[k]++; all += t}
     END {for (k in s) printf "  %-28s %4d TUs %8.1f CPU s\n", k, c[k], s[k]; printf "  %-28s %4d TUs %8.1f CPU s\n", "compiles", NR, all}' "$log" | sort -k4 -rn
echo "costliest translation units (CPU s):"
awk '{printf "  %7.1f  %s\n", $1 + $2, $3}' "$log" | sort -rn | head -10
