#!/bin/sh
# The API reference cannot fall behind the installed headers: runs Doxygen over them (the
# Doxyfile `make docs` uses, without writing HTML) and fails on any warning, except the
# undocumented symbols listed in docs/api/undocumented.txt, the ones not documented yet. That
# list may only shrink: a symbol that gains a comment must leave it, and a new public symbol
# without a `///` summary fails this check (docs/testing.md, "The API reference").
#   check_api_docs.sh DOXYFILE SOURCE_DIR OUT_DIR [--update]
# --update rewrites the list from what Doxygen reports (after documenting symbols).
set -e
doxyfile=$1 src=$2 out=$3
command -v doxygen > /dev/null || { echo "check_api_docs: doxygen is not installed (make deps-test, or apt-get install doxygen)"; exit 1; }
mkdir -p "$out"
log="$out/check-warnings.log"
{ cat "$doxyfile"; printf 'GENERATE_HTML = NO\nGENERATE_XML = NO\nWARN_LOGFILE = %s\nOUTPUT_DIRECTORY = %s\n' "$log" "$out"; } |
  (cd "$src" && doxygen - > "$out/check-doxygen.txt" 2>&1) || { cat "$out/check-doxygen.txt"; exit 1; }
# Line numbers move with every edit: the list names a symbol by file and Doxygen's description.
sed -e "s#^$src/##" -e 's#^\([^:]*\):[0-9]*: warning: #\1: #' "$log" | LC_ALL=C sort -u > "$out/check-found.txt"
list="$src/docs/api/undocumented.txt"
if [ "$4" = --update ]; then
  grep ' is not documented\.$' "$out/check-found.txt" > "$list" || true
  echo "check_api_docs: $(wc -l < "$list") undocumented symbols listed in $list"
fi
status=0
other=$(grep -v ' is not documented\.$' "$out/check-found.txt" || true)
if [ -n "$other" ]; then
  echo "check_api_docs: Doxygen reports errors in documentation comments:"; echo "$other"; status=1
fi
new=$(grep ' is not documented\.$' "$out/check-found.txt" | LC_ALL=C comm -23 - "$list" || true)
if [ -n "$new" ]; then
  echo "check_api_docs: public symbols without a /// summary (write one above each):"; echo "$new"; status=1
fi
gone=$(grep ' is not documented\.$' "$out/check-found.txt" | LC_ALL=C comm -13 - "$list" || true)
if [ -n "$gone" ]; then
  echo "check_api_docs: these symbols are documented: remove their lines from docs/api/undocumented.txt (or run with --update):"
  echo "$gone"; status=1
fi
[ $status = 0 ] && echo "check_api_docs: $(grep -c . "$list" || true) symbols listed as not yet documented, no other warning"
exit $status
