#!/usr/bin/env python3
"""Turns the `//` comments of attnlab's installed headers that document a symbol into Doxygen
`///` comments, and files each header into its module's group (docs/api/groups.dox).

Only comments at namespace, class, struct or enum scope change (never those inside a function
body):
  - a block of `//` lines directly above a declaration becomes a `///` block;
  - a trailing `// text` after a member or enumerator (`...;` or `...,`) becomes `///< text`,
    with its aligned continuation lines;
  - the comment at the top of the file becomes the file's documentation, with `@ingroup`.
The file's declarations are wrapped in `@addtogroup <module>` ... `@}`.

Usage: to_doc_comments.py HEADER...   (rewrites in place; running it twice changes nothing; on a
converted header it converts only the comments added since)
"""
import re
import sys

GROUPS = [
    ("nn/attention/", "attention"),
    ("tensor/", "tensor"),
    ("autograd/", "autograd"),
    ("nn/", "nn"),
    ("optim/", "optim"),
    ("dist/", "dist"),
    ("experiments/runner/", "runner"),
    ("experiments/catalog/", "runner"),
    ("experiments/models/", "runner"),
    ("runner.hpp", "runner"),
    ("experiments/data/", "data"),
    ("experiments/analysis/", "analysis"),
    ("experiments/plot/", "analysis"),
    ("experiments/cli/", "cli"),
    ("cli.hpp", "cli"),
    ("attnlab.hpp", None),
]

SCOPE_RE = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$|^\s*extern\s+\"C\"")
ACCESS_RE = re.compile(r"^\s*(public|private|protected)\s*:")


def group_of(path):
    for prefix, group in GROUPS:
        if path.startswith(prefix) or path == prefix:
            return group
    raise SystemExit(f"to_doc_comments.py: no group for {path}")


def code_part(line):
    """The line without its `//` comment (string and char literals respected), and the comment."""
    i, quote = 0, None
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "\"'":
            # a digit separator (1'000) is not a char literal
            if c == "'" and i > 0 and line[i - 1].isalnum() and i + 1 < len(line) and line[i + 1].isalnum():
                pass
            else:
                quote = c
        elif line.startswith("//", i):
            return line[:i], line[i:]
        i += 1
    return line, ""


def strip_literals(code):
    return re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])+\'', '""', code)


def convert(path, text):
    group = group_of(path)
    lines = text.split("\n")
    out = []
    # The file comment: the `//` lines before the first preprocessor line.
    i = 0
    head = []
    while i < len(lines) and lines[i].startswith("//"):
        head.append(lines[i])
        i += 1
    converted = bool(head and head[0].startswith("/// @file"))
    if converted:
        out.extend(head)  # file comment and group already in place: convert what was added since
    else:
        out.append("/// @file")
        for h in head:
            body = h[2:]
            out.append("///" + body)
        if group:
            out.append(f"/// @ingroup {group}")

    stack = []  # 'scope' or 'body' per open brace
    statement = ""  # code since the last ; { or }
    pending = []  # indices in `out` of a comment-only block at scope level
    trailing_col = None  # column of the last converted trailing comment
    opened_group = False
    group_done = converted
    in_block_comment = False
    for line in lines[i:]:
        stripped = line.strip()
        at_scope = all(s == "scope" for s in stack)
        if in_block_comment:
            out.append(line)
            if "*/" in line:
                in_block_comment = False
            continue
        if group and not opened_group and not group_done and re.match(r"^namespace\b", line):
            out.append(f"/// @addtogroup {group}")
            out.append("/// @{")
            opened_group = True
        if stripped.startswith("//"):
            col = line.index("//")
            if at_scope and trailing_col is not None and col == trailing_col and not pending:
                out.append(line[:col] + "///<" + line[col + 2:])
                continue
            trailing_col = None
            if re.match(r"//\s*(--|==)", stripped):  # a section title, not a symbol's summary
                pending = []
                out.append(line)
                continue
            if at_scope and not stripped.startswith("///"):
                pending.append(len(out))
            out.append(line)
            continue
        trailing_col = None
        if stripped.startswith("/*"):
            pending = []
            if "*/" not in stripped:
                in_block_comment = True
            out.append(line)
            continue
        # A comment block documents the line right below it, when that line declares something.
        if pending:
            if stripped and not stripped.startswith("#") and not stripped.startswith("}") \
                    and not ACCESS_RE.match(line):
                for k in pending:
                    j = out[k].index("//")
                    out[k] = out[k][:j] + "///" + out[k][j + 2:]
            pending = []
        if stripped.startswith("#"):
            out.append(line)
            continue
        code, comment = code_part(line)
        if at_scope and comment and not comment.startswith("///") and code.strip() \
                and re.search(r"[;,]\s*$", code) and not code.strip().startswith("}"):
            col = len(code)
            line = code + "///<" + comment[2:]
            trailing_col = col
        out.append(line)
        # Track braces to know whether the next line is at namespace/class scope.
        for c in strip_literals(code):
            if c == "{":
                stack.append("scope" if SCOPE_RE.search(statement) else "body")
                statement = ""
            elif c == "}":
                if stack:
                    stack.pop()
                statement = ""
            elif c == ";":
                statement = ""
            else:
                statement += c
        statement += " "
    if opened_group:
        while out and out[-1] == "":
            out.pop()
        out.append("/// @}")
        out.append("")
    return "\n".join(out)


def main():
    for path in sys.argv[1:]:
        with open(path) as f:
            text = f.read()
        new = convert(path, text)
        if new != text:
            with open(path, "w") as f:
                f.write(new)


if __name__ == "__main__":
    main()
