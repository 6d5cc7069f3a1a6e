#!/bin/sh
# Checks every quoted #include of the tree at ROOT against the layering table of
# ROOT/docs/conventions.md ("Folders are the architecture"): a file may include only files whose
# row is listed in its own row's "may include" column ("everything" allows any). A path's row is
# the longest folder (or file) of the table's first column that starts it; an include whose path
# starts no row (a header beside the file, "helpers.hpp") is the file's own folder's business. A
# source file with quoted includes that is in no row is an error, so that a new folder gets a row.
# Prints one line per violation; exit 0 when there is none, 1 otherwise, 2 for a usage error.
#
#   sh tests/check_layering.sh .
set -eu
[ $# -eq 1 ] || { echo "usage: check_layering.sh ROOT" >&2; exit 2; }
root=$1
conventions=$root/docs/conventions.md
[ -f "$conventions" ] || { echo "check_layering.sh: $conventions: no such file" >&2; exit 2; }

cd "$root"
# "path:line:#include "x/y.hpp"" for every C++ source and header, build directories and .git left out.
find . \( -name 'build*' -o -name '.git' \) -prune -o -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) -print |
  sed 's#^\./##' | sort | xargs grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' 2>/dev/null |
  awk -v table="$conventions" '
    # The table: the rows between the section heading and the next heading.
    BEGIN {
      on = 0; rows = 0
      while ((getline line < table) > 0) {
        if (line ~ /^## Folders are the architecture/) { on = 1; continue }
        if (on && line ~ /^## /) break
        if (!on || line !~ /^\| `/) continue
        n = split(line, cell, "|")  # cell[2] the folders, cell[4] what they may include
        allowed = ""
        if (cell[4] ~ /everything/) allowed = "*"
        else for (rest = cell[4]; match(rest, /`[^`]+`/); rest = substr(rest, RSTART + RLENGTH))
          allowed = allowed " " substr(rest, RSTART + 1, RLENGTH - 2) " "
        for (rest = cell[2]; match(rest, /`[^`]+`/); rest = substr(rest, RSTART + RLENGTH)) {
          p = substr(rest, RSTART + 1, RLENGTH - 2)
          may[p] = allowed; prefix[++rows] = p
        }
      }
      if (rows == 0) { print "check_layering.sh: no layering table in " table; bad = 1; exit }
    }
    # The row of a path: the longest prefix (a folder ending in "/", or the whole file name).
    function row_of(path,    i, best) {
      best = ""
      for (i = 1; i <= rows; i++)
        if ((prefix[i] ~ /\/$/ ? index(path, prefix[i]) == 1 : path == prefix[i]) && length(prefix[i]) > length(best))
          best = prefix[i]
      return best
    }
    {
      colon = index($0, ":"); file = substr($0, 1, colon - 1)
      rest = substr($0, colon + 1); line = substr(rest, 1, index(rest, ":") - 1)
      match($0, /"[^"]+"/); inc = substr($0, RSTART + 1, RLENGTH - 2)
      from = row_of(file)
      if (from == "") {
        if (!(file in unlisted)) print file ": in no row of the layering table of docs/conventions.md"
        unlisted[file] = 1; bad = 1; next
      }
      to = row_of(inc)
      if (to == "" || may[from] == "*" || index(may[from], " " to " ")) next
      print file ":" line ": includes " inc " (row " to "), which the row " from " may not include (docs/conventions.md)"
      bad = 1; checked++
    }
    END { exit bad ? 1 : 0 }'
