#!/usr/bin/env python3
"""Doxygen's input filter for the markdown guides (docs/api/Doxyfile.in, FILTER_PATTERNS).

A guide links its own sections GitHub's way, [text](#slug), with the slug GitHub derives from
the heading ("## `mla` — multi-head latent attention" -> #mla--multi-head-latent-attention).
Doxygen 1.9 gives headings no such ids, so every such link would be unresolved in the reference.
For each slug the file links to, this labels its heading {#FILE-slug} and rewrites the links to
#FILE-slug: the file's name keeps labels unique across pages (Doxygen's labels are global) and
makes them start with a letter (a slug may start with a digit, "6-lean-training-steps").
Lines keep their numbers; fenced code blocks are left alone.
    md_anchor_filter.py FILE.md   (the filtered text on standard output)
"""
import re
import sys
from pathlib import Path

HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\]\(#([^)\s]+)\)")


def slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = title.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def main() -> None:
    path = Path(sys.argv[1])
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    prefix = re.sub(r"[^A-Za-z0-9]", "_", path.stem)
    in_code = False
    code = []
    for line in lines:
        if FENCE.match(line):
            in_code = not in_code
            code.append(True)
        else:
            code.append(in_code)
    linked = {m.group(1) for line, c in zip(lines, code) if not c for m in LINK.finditer(line)}
    out = []
    for line, c in zip(lines, code):
        if not c:
            h = HEADING.match(line)
            if h and "{#" not in line and slug(h.group(2)) in linked:
                line = f"{line.rstrip()} {{#{prefix}-{slug(h.group(2))}}}"
            line = LINK.sub(lambda m: f"](#{prefix}-{m.group(1)})" if m.group(1) in linked else m.group(0), line)
        out.append(line)
    sys.stdout.write("\n".join(out))


main()
