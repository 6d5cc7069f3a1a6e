#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into fuzz/corpus/NAME/ (docs/fuzzing.md): a few
small valid inputs per parser, so the fuzzer starts from files that get past the first checks.
Standard library only; run with /usr/bin/python3 fuzz/make_corpus.py from the repository root or
from fuzz/. The output is committed; rerunning gives the same bytes."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors: 8-byte little-endian header length, JSON header, data ----
def safetensors(entries, metadata=None):
    header, data = {}, b""
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


write("safetensors", "f32_meta", safetensors([("w", "F32", [2, 3], struct.pack("<6f", 1, -2, 0.5, 0, 3, 4))],
                                               {"step": "3", "format": "pt"}))
write("safetensors", "dtypes", safetensors([
    ("a.f64", "F64", [], struct.pack("<d", 2.5)),
    ("b.i64", "I64", [2], struct.pack("<2q", -1, 7)),
    ("c.bool", "BOOL", [3], bytes([0, 1, 1])),
    ("d.f16", "F16", [2], struct.pack("<2H", 0x3C00, 0xC000)),
    ("e.bf16", "BF16", [1], struct.pack("<H", 0x3F80)),
    ("f.u8", "U8", [2], bytes([0, 5])),
    ("g.i32", "I32", [1, 1], struct.pack("<i", -3)),
    ("h.i8", "I8", [1], struct.pack("<b", -4)),
    ("i.i16", "I16", [1], struct.pack("<h", 300)),
    ("j.empty", "F32", [0, 2], b""),
]))
write("safetensors", "no_tensors", safetensors([], {"note": "only metadata"}))


# ---- .npy: magic, version, header length, dict header padded to 64 bytes, data ----
def npy(descr, shape, raw, fortran=False, version=1):
    shape_text = f"({shape[0]},)" if len(shape) == 1 else "(" + ", ".join(map(str, shape)) + ")"
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape_text}, }}"
    size = 4 if version >= 2 else 2
    pre = 6 + 2 + size
    header += " " * ((-(pre + len(header) + 1)) % 64) + "\n"
    head = b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<I" if size == 4 else "<H", len(header))
    return head + header.encode("latin1") + raw


write("npy", "f4_2x3", npy("<f4", [2, 3], struct.pack("<6f", 1, 2, 3, 4, 5, 6)))
write("npy", "f8_scalar", npy("<f8", [], struct.pack("<d", -1.5)))
write("npy", "i4_big_fortran", npy(">i4", [2, 2], struct.pack(">4i", 1, 2, 3, 4), fortran=True))
write("npy", "b1", npy("|b1", [3], bytes([1, 0, 1])))
write("npy", "i8_empty_v2", npy("<i8", [0], b"", version=2))
write("npy", "f2", npy("<f2", [2], struct.pack("<2H", 0x3C00, 0x7C00)))
write("npy", "u1_v3", npy("|u1", [2, 1], bytes([0, 255]), version=3))


# ---- IDX (fuzz_idx.cpp): limit byte, image file length (uint16 LE), image file, label file ----
def idx(limit, labels, pixels_of=lambda i: bytes((i * 7 + j) % 256 for j in range(784))):
    n = len(labels)
    images = struct.pack(">IIII", 0x803, n, 28, 28) + b"".join(pixels_of(i) for i in range(n))
    label_file = struct.pack(">II", 0x801, n) + bytes(labels)
    return bytes([limit]) + struct.pack("<H", len(images)) + images + label_file


write("idx", "two_all", idx(0, [3, 9]))
write("idx", "two_limit1", idx(1, [0, 1]))
write("idx", "empty", idx(0, []))

# ---- config (fuzz_config.cpp): first line a --set assignment, the rest a TOML file ----
write("config", "tables", 'train.steps=5\n[train]\nlr = 0.01\n[model]\ncausal = true\nattention = "mha(heads=2)"\n')
write("config", "dotted", 'model.attention=talking_heads(heads=4)\nseed = 3\nmodel.block.name = "y"\ntrain.lr = 2\n')
write("config", "inline", 'model.causal=false\nmodel = { attention = "local(window=4)", block = { name = "z" } }\n')

# ---- sweep files ----
write("sweep", "grid", '''experiment = "classify"
preset = "quick"
workers = 2
seeds = [0, 1]
[set]
"task.name" = "listops"
[grid]
"model.attention" = ["mha(heads=4)", "local(window=16)"]
"train.lr" = [0.001, 0.0003]
[report]
metric = "val_acc"
sort = "desc"
x = "train.lr"
curves = ["loss"]
''')
write("sweep", "zip_expect", '''experiment = "example"
[zip]
"model.heads" = [2, 4]
"model.key_size" = [32, 16]
[report]
metric = "val_acc"
baseline = { "model.heads" = 2 }
bubble = { x = "seconds", y = "val_acc", size = "params", label = "model.heads" }
measured = { file = "m.csv", key = "model.heads" }
[[report.expect]]
name = "more heads help"
a = { "model.heads" = 4 }
b = { "model.heads" = 2 }
relation = "equal"
margin = 0.01
[[report.expect]]
name = "above chance"
a = { "model.heads" = 4 }
relation = "above"
value = 0.1
minus = "acc_random"
''')

# ---- attention specs: every variant by name, and a few with options ----
for name in ["mha", "talking_heads", "collaborative", "synthesizer", "local", "sparse_strided", "sparse_fixed",
             "dilated", "longformer", "bigbird", "lsh", "routing", "sinkhorn", "linformer", "compressed", "nystrom",
             "linear", "performer", "fnet", "mixer", "mla", "diff", "retention"]:
    write("spec", name, name)
write("spec", "mha_options", "mha(heads=2, key_size=4, causal=true, kv_heads=1, rope=true, score=sigmoid)")
write("spec", "mha_lists", "mha(heads=4, kv_index=0+0+1+1, kv_heads=2, alibi=true, alibi_slopes=0.5+0.25+0.125+0.0625)")
write("spec", "talking_heads_options", "talking_heads(heads=4, logit_heads=2, value_heads=2, mix_init=random)")
write("spec", "mla_options", "mla(heads=2)")
write("spec", "bigbird_options", "bigbird(heads=2, block=4, window=3, global=1, random=1, max_len=64)")
write("spec", "local_options", "local( window = 3 , heads = 2 )")

# ---- JSON: a safetensors header, a run's meta.json, escapes and numbers ----
write("json", "header", '{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"__metadata__":{"step":"3"}}')
write("json", "meta", json.dumps({
    "experiment": "example", "preset": "quick", "command": "attnlab run example", "threads": 2,
    "start_time": "2026-01-01T00:00:00Z", "resumed_at": [],
    "segments": [{"start": "2026-01-01T00:00:00Z", "threads": 4}]}, indent=2))
write("json", "meta_old", '{"experiment": "example", "start_time": "2026-01-01T00:00:00Z", "threads": 1}')
write("json", "escapes", '["a\\"b\\\\c\\/\\b\\f\\n\\r\\t", "\\u00e9\\ud83d\\ude00", "\u00e9", -0.5e-3, 12345678901234567890, true, false, null, {}]')

# ---- viz_request: /api/attend queries of attnlab viz --serve ----
write("viz_request", "text", "input=the+cat+sat%0Aon+the+mat")
write("viz_request", "listops", "input=%5BMAX+2+%5BMIN+4+7+%5D+0+%5D")
write("viz_request", "example", "example=3")
write("viz_request", "utf8", "input=caf%C3%A9+%F0%9F%98%80&")
write("viz_request", "both", "input=a&example=1")
# ---- run keys: --set assignments of the lm experiment, one per line ----
write("run_key", "small_lm", "task.length=24\ntrain.steps=3\nmodel.d_model=16\nmodel.ffn_hidden=32\n"
                             "model.attention=mha(heads=2)\neval.batches=1\n")
write("run_key", "options", "model.attention=mha(heads=2, alibi=true, alibi_slopes=1e21+0.5)\nmodel.d_model=16\n"
                            "train.lr=3e-4\ntrain.groups=*.attn.*: lr=0.01\ntask.pack=true\ntrain.accumulate=2\n")
write("run_key", "bounds", "eval.batches=2147483647\ntrain.steps=-1\nmodel.layers=0\n")

# ---- run directories: files opened by "==> NAME <==" lines ----
write("run_dir", "complete", """==> config.toml <==
seed = 0
[train]
steps = 3
==> summary.json <==
{"experiment": "lm", "status": "complete", "steps": 3, "seconds": 1.5, "peak_rss_mb": 40, "metrics": {"val_bpc": 3.9}}
==> metrics.jsonl <==
{"step": 1, "time": 0.1, "train_loss": 4.1}
{"step": 3, "time": 0.3, "train_loss": 3.2, "val_bpc": 3.9}
==> meta.json <==
{"experiment": "lm", "start_time": "2026-01-01T00:00:00Z", "threads": 2, "resumed_at": [], "segments": []}
==> point.json <==
{"model.attention": "mha(heads=2)", "seed": 0}
""")
write("run_dir", "odd", """==> summary.json <==
[]
==> metrics.jsonl <==
not json
{"step": "3"}
{"step": 2
==> failure.json <==
{"error": 7}
""")
