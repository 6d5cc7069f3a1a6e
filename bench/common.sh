# bench/common.sh: what every bench/run*.sh script shares; sourced after it has set HERE.
#
# TORCH_PY   a python3 that imports torch (the first of $PYTHON, python3, /usr/bin/python3), or
#            empty when there is none or NO_TORCH is set: the scripts then print attnlab alone
# REPORT_PY  TORCH_PY, else any python3: the one that writes the markdown reports
# LOAD_START the load average when the script started (exported: the reports print it, and
#            warn when the machine was busy, which distorts every number, torch's most)

TORCH_PY=""
[ -n "${NO_TORCH:-}" ] || for py in ${PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import torch' >/dev/null 2>&1; then
    TORCH_PY=$py
    break
  fi
done
REPORT_PY=$TORCH_PY
[ -n "$REPORT_PY" ] || for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1; then
    REPORT_PY=$py
    break
  fi
done

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
export LOAD_START
