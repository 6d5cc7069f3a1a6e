#!/bin/sh
# Doxygen's input filter for the headers (docs/api/Doxyfile.in, FILTER_PATTERNS). With
# JAVADOC_AUTOBRIEF a comment's one-line summary ends at its first full stop followed by a space
# or a line end, so "(Zaheer et al. 2020)" or "e.g. x" would cut the summary short. In `///`
# lines this writes Doxygen's escaped space after e.g., i.e., et al., vs. and cf., which keeps
# the sentence whole; the headers stay plain text, and the lines keep their numbers.
#   brief_filter.sh HEADER   (the filtered text on standard output)
exec sed -e '/^[[:space:]]*\/\/\//s/\(\<e\.g\|\<i\.e\|\<et al\|\<vs\|\<cf\)\.\( \|$\)/\1.\\ /g' "$1"
