#!/bin/sh
# Run by CTest (tests/CMakeLists.txt, programs/*): PROGRAM --help exits 0 and prints "Usage";
# PROGRAM with a bad argument exits non-zero but below 128 (not killed by a signal, as an uncaught
# exception's abort would be) and says why on stderr.
#   check_program.sh PROGRAM [BAD_ARGUMENT]     (BAD_ARGUMENT defaults to --no-such-option)
prog=$1
bad=${2:---no-such-option}
out=$("$prog" --help 2>&1)
status=$?
[ "$status" -eq 0 ] || { echo "$prog --help: exit status $status"; exit 1; }
echo "$out" | grep -q "Usage" || { echo "$prog --help: no 'Usage' in: $out"; exit 1; }
err=$("$prog" "$bad" 2>&1 >/dev/null)
status=$?
[ "$status" -ne 0 ] || { echo "$prog $bad: exit status 0"; exit 1; }
[ "$status" -lt 128 ] || { echo "$prog $bad: killed by signal $((status - 128))"; exit 1; }
[ -n "$err" ] || { echo "$prog $bad: exit status $status without a message on stderr"; exit 1; }
echo "$prog: --help ok; '$bad' -> exit $status: $err"
