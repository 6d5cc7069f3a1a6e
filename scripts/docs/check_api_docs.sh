#!/bin/sh
# The API reference cannot fall behind the installed headers: runs Doxygen over them (the
# Doxyfile `make docs` uses, writing XML instead of HTML: Doxygen checks a comment's markup, such
# as a bare <unk> or an unresolved \ref, only while it writes an output, and XML is the fastest
# one; without the summaries' input filter, a process per header that only escapes spaces) and
# fails on any warning, except the undocumented symbols listed in docs/api/undocumented.txt, the
# ones not documented yet. That list may only shrink: a symbol that gains a comment must leave
# it, and a new public symbol without a `///` summary fails this check (docs/testing.md, "The API
# reference").
#   check_api_docs.sh DOXYFILE SOURCE_DIR OUT_DIR [--update]
# --update rewrites the list from what Doxygen reports (after documenting symbols), keeping its
# comment lines (those starting with '#'), which the comparison ignores.
set -e
doxyfile=$1 src=$2 out=$3
command -v doxygen > /dev/null || { echo "check_api_docs: doxygen is not installed (make deps-test, or apt-get install doxygen)"; exit 1; }
mkdir -p "$out"
log="$out/check-warnings.log"
{ cat "$doxyfile"; printf 'GENERATE_HTML = NO\nGENERATE_XML = YES\nXML_PROGRAMLISTING = NO\nFILTER_PATTERNS =\nWARN_LOGFILE = %s\nOUTPUT_DIRECTORY = %s\n' "$log" "$out"; } |
  (cd "$src" && doxygen - > "$out/check-doxygen.txt" 2>&1) || { cat "$out/check-doxygen.txt"; exit 1; }
# Line numbers move with every edit: the list names a symbol by file and Doxygen's description.
sed -e "s#^$src/##" -e 's#^\([^:]*\):[0-9]*: warning: #\1: #' "$log" | LC_ALL=C sort -u > "$out/check-found.txt"
list="$src/docs/api/undocumented.txt"
if [ "$4" = --update ]; then
  { grep '^#' "$list" || true; grep ' is not documented\.$' "$out/check-found.txt" || true; } > "$out/check-list.txt"
  cp "$out/check-list.txt" "$list"
  echo "check_api_docs: $(grep -vc '^#' "$list" || true) undocumented symbols listed in $list"
fi
# The listed symbols, without the list's comment and blank lines.
grep -v -e '^#' -e '^$' "$list" | LC_ALL=C sort -u > "$out/check-listed.txt" || true
status=0
other=$(grep -v ' is not documented\.$' "$out/check-found.txt" || true)
if [ -n "$other" ]; then
  echo "check_api_docs: Doxygen reports errors in documentation comments:"; echo "$other"; status=1
fi
# The group pages (docs/api/groups.dox) link the guides by the names Doxygen gives their pages,
# docs/NAME.md -> md_docs_NAME.html, which this run does not build: each must name a guide.
missing=$(grep -o 'md_docs_[A-Za-z0-9_]*\.html' "$src/docs/api/groups.dox" | LC_ALL=C sort -u |
  while read -r page; do name=${page#md_docs_}; name=${name%.html}; [ -f "$src/docs/$name.md" ] || echo "$page: no docs/$name.md"; done)
if [ -n "$missing" ]; then
  echo "check_api_docs: docs/api/groups.dox links guides that do not exist:"; echo "$missing"; status=1
fi
new=$(grep ' is not documented\.$' "$out/check-found.txt" | LC_ALL=C comm -23 - "$out/check-listed.txt" || true)
if [ -n "$new" ]; then
  echo "check_api_docs: public symbols without a /// summary (write one above each):"; echo "$new"; status=1
fi
gone=$(grep ' is not documented\.$' "$out/check-found.txt" | LC_ALL=C comm -13 - "$out/check-listed.txt" || true)
if [ -n "$gone" ]; then
  echo "check_api_docs: these symbols are documented: remove their lines from docs/api/undocumented.txt (or run with --update):"
  echo "$gone"; status=1
fi
[ $status = 0 ] && echo "check_api_docs: $(grep -c . "$out/check-listed.txt" || true) symbols listed as not yet documented, no other warning"
exit $status
