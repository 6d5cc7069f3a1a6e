#!/bin/sh
# The layering check (check_layering.sh) on small trees with the repository's table: it passes a
# tree that keeps the table, and fails, naming file, line and rows, one whose experiments library
# includes the catalog, one whose tensor/ includes nn/, and one with a file in no row.
#
#   sh tests/check_layering_test.sh SOURCE_DIR WORK_DIR
set -eu
src=$1
work=$2
check="sh $src/tests/check_layering.sh"

# A tree with the repository's docs/conventions.md and the files given as "path:include" pairs.
tree() {
  rm -rf "$work" && mkdir -p "$work/docs" && cp "$src/docs/conventions.md" "$work/docs/"
  for pair in "$@"; do
    file=${pair%%:*} inc=${pair#*:}
    mkdir -p "$work/$(dirname "$file")"
    printf '// test\n#include "%s"\n' "$inc" >> "$work/$file"
  done
}

expect_fail() {  # expect_fail MESSAGE
  if $check "$work" > "$work.out" 2>&1; then echo "passed, expected: $1"; exit 1; fi
  grep -qF "$1" "$work.out" || { echo "expected '$1', got:"; cat "$work.out"; exit 1; }
}

tree experiments/cli/generate.cpp:experiments/models/models.hpp experiments/catalog/lm.cpp:experiments/models/models.hpp \
  nn/linear.cpp:tensor/tensor.hpp tests/nn/test_a.cpp:experiments/catalog/x.hpp
$check "$work" || { echo "a tree that keeps the table failed"; exit 1; }

tree experiments/cli/generate.cpp:experiments/catalog/models.hpp
expect_fail "experiments/cli/generate.cpp:2: includes experiments/catalog/models.hpp (row experiments/catalog/), which the row experiments/ may not include"

tree tensor/tensor.cpp:nn/module.hpp
expect_fail "tensor/tensor.cpp:2: includes nn/module.hpp (row nn/), which the row tensor/ may not include"

tree newfolder/a.cpp:tensor/tensor.hpp
expect_fail "newfolder/a.cpp: in no row of the layering table"
echo "check_layering.sh: 4 trees as expected"
