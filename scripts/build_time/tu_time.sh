#!/bin/sh
# A compiler launcher that logs each compile's CPU time (user + system seconds of the compiler and
# its children) to $ATTNLAB_TU_LOG, one line per translation unit: "user sys object".
# Used by scripts/build_time/measure.sh (docs/testing.md, "Build time").
#   cmake -B build -DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/scripts/build_time/tu_time.sh
log=${ATTNLAB_TU_LOG:-/tmp/attnlab_tu_times.txt}
out=unknown
prev=
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out=$a; fi
  prev=$a
done
exec /usr/bin/time -a -o "$log" -f "%U %S $out" "$@"
