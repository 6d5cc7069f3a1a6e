// `attnlab viz RUN_DIR` (heads_commands.hpp): one self-contained HTML page to browse a run's
// attention maps. The page is a static template (kPage) with the data spliced in as JSON inside
// <script type="application/json">; its inline script decodes the maps and draws the chosen
// (example, layer, head) on a canvas. No external resource is referenced (no fonts, no
// scripts, no images), so the file works offline and can be mailed around.
//
// Size: each map is n x n weights quantised to 16 bits (|error| <= 1/131070) and base64-coded,
// 2.67 bytes per weight: examples x layers x heads x n^2 of them, bounded by --examples <= 8 and
// --max-tokens <= 256.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/ops.hpp"
#include "experiments/analysis/probe.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/cli/heads_commands.hpp"
#include "experiments/plot/png.hpp"
#include "tensor/io.hpp"

namespace attnlab::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string base64(const std::vector<uint8_t>& bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t v = uint32_t(bytes[i]) << 16 | (i + 1 < bytes.size() ? uint32_t(bytes[i + 1]) << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t(bytes[i + 2]) : 0);
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += i + 1 < bytes.size() ? kAlphabet[v >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

// One head's map restricted to `keep` positions, row-major, as little-endian uint16 (w * 65535).
std::string encode_map(const std::vector<double>& p, int64_t N, int64_t offset, const std::vector<int64_t>& keep) {
  std::vector<uint8_t> bytes;
  bytes.reserve(keep.size() * keep.size() * 2);
  for (int64_t q : keep)
    for (int64_t k : keep) {
      const auto v = uint16_t(std::lround(std::clamp(p[size_t(offset + q * N + k)], 0.0, 1.0) * 65535));
      bytes.push_back(uint8_t(v & 255));
      bytes.push_back(uint8_t(v >> 8));
    }
  return base64(bytes);
}

// The example's maps of every layer and head, its tokens and a note, as the page's JSON.
json example_json(const catalog::LoadedRun& run, const analysis::Probe& probe, const data::Batch& one,
                  const std::vector<Tensor>& maps, const std::string& note) {
  Tensor tokens = probe.axis_tokens ? probe.axis_tokens(one) : Tensor();  // (1, N)
  const int64_t N = maps[0].size(2);
  std::vector<int64_t> tok = tokens.defined() ? tokens.to_vector<int64_t>() : std::vector<int64_t>(size_t(N), -2);
  std::vector<int64_t> keep;
  json labels = json::array();
  for (int64_t p = 0; p < N; ++p) {
    if (run.task.pad_id >= 0 && tok[size_t(p)] == run.task.pad_id) continue;  // padding: neither query nor key
    keep.push_back(p);
    labels.push_back(axis_label(run, tok[size_t(p)], p));
  }
  json layers = json::array();
  for (const Tensor& m : maps) {  // (1, h, N, N)
    const std::vector<double> p = to(m, kFloat64).to_vector<double>();
    json heads = json::array();
    for (int64_t i = 0; i < m.size(1); ++i) heads.push_back(encode_map(p, N, i * N * N, keep));
    layers.push_back(heads);
  }
  return {{"tokens", labels}, {"note", note}, {"maps", layers}};
}

// analysis.json's per-head numbers, when `attnlab analyze` has written it next to the run.
json head_summary(const fs::path& run_dir) {
  std::ifstream in(run_dir / "analysis" / "analysis.json");
  if (!in) return nullptr;
  std::stringstream ss;
  ss << in.rdbuf();
  json a = json::parse(ss.str(), nullptr, false);
  if (a.is_discarded() || !a.contains("layers")) return nullptr;
  json heads = json::array();
  for (const json& l : a["layers"])
    for (const json& h : l["heads"])
      heads.push_back({{"layer", h["layer"]}, {"head", h["head"]}, {"role", h["role"]}, {"confidence", h["confidence"]},
                       {"importance", h["importance"]}, {"relevance", h["relevance"]}, {"offset", h["top_offset"]},
                       {"offset_share", h["top_offset_share"]}});
  return {{"heads", heads}, {"examples", a.value("examples", 0)}, {"importance", a.value("importance", "")},
          {"relevance", a.value("relevance", "")}};
}

extern const char* const kPage;

int viz(const VizOptions& o, std::ostream& out) {
  if (o.examples < 1 || o.examples > 8) fail<ValueError>("--examples must be in [1, 8], got {}", o.examples);
  if (o.max_tokens < 2 || o.max_tokens > 256) fail<ValueError>("--max-tokens must be in [2, 256], got {}", o.max_tokens);
  catalog::LoadedRun run = load_run_checked(o.run_dir);
  analysis::Probe probe = run_probe(run);
  const fs::path path = o.out.empty() ? o.run_dir / "viz.html" : o.out;

  json examples = json::array();
  std::vector<int64_t> heads_per_layer;
  const int64_t available = validation_size(run);
  if (run.task.language_model) {
    // Causal: the first T positions of a window attend only among themselves, so a window cut
    // to --max-tokens shows exactly what the model computes on them.
    const int64_t T = std::min(o.max_tokens, run.task.seq_len), n = std::min(o.examples, available);
    for_each_validation_batch(run, n, 1, [&](const data::Batch& b) {
      data::Batch cut{narrow(b.inputs, 1, 0, T), narrow(b.targets, 1, 0, T)};  // (1, T), (1, T)
      auto [logits, maps] = analysis::capture_attention(probe, cut);
      examples.push_back(example_json(run, probe, cut, maps, fmt::format("validation window {}", examples.size())));
      heads_per_layer.clear();
      for (const Tensor& m : maps) heads_per_layer.push_back(m.size(1));
    });
  } else {
    // Bidirectional: an example is shown whole or not at all; the first ones with at most
    // --max-tokens real tokens are taken.
    const int64_t scan = std::min<int64_t>(available, 2000);
    int64_t index = 0;
    for_each_validation_batch(run, scan, 1, [&](const data::Batch& b) {
      const int64_t i = index++;
      if (int64_t(examples.size()) >= o.examples) return;
      int64_t real = b.inputs.size(1);
      if (run.task.pad_id >= 0 && b.inputs.dim() == 2) real = sum(ne(b.inputs, double(run.task.pad_id))).item<int64_t>();
      if (real > o.max_tokens) return;
      auto [logits, maps] = analysis::capture_attention(probe, b);
      const int64_t pred = argmax(logits, -1).item<int64_t>();
      const int64_t target = b.targets.item<int64_t>();
      examples.push_back(example_json(run, probe, b, maps,
                                      fmt::format("validation example {}: label {}, predicted {}", i,
                                                  run.task.label(target), run.task.label(pred))));
      heads_per_layer.clear();
      for (const Tensor& m : maps) heads_per_layer.push_back(m.size(1));
    });
    if (examples.empty())
      fail<ValueError>("none of the first {} validation examples has <= {} tokens; raise --max-tokens (up to 256)", scan,
                       o.max_tokens);
  }

  json viridis = json::array();
  for (int k = 0; k <= 8; ++k) {
    const plot::Rgb c = plot::viridis(k / 8.0);
    viridis.push_back({c[0], c[1], c[2]});
  }
  json data = {{"title", o.run_dir.string()},
               {"run",
                {{"task", run.task.name},
                 {"attention", run.config.get_string("model.attention")},
                 {"step", run.step},
                 {"causal", probe.causal}}},
               {"layers", heads_per_layer},
               {"viridis", viridis},
               {"examples", examples},
               {"summary", head_summary(o.run_dir)}};
  // "</" would end the <script> element early; "<\/" is the same JSON string.
  std::string text = data.dump();
  for (size_t p = 0; (p = text.find("</", p)) != std::string::npos; p += 3) text.replace(p, 2, "<\\/");
  std::string page = kPage;
  const std::string marker = "@DATA@";
  page.replace(page.find(marker), marker.size(), text);
  if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
  write_text_atomic(path.string(), page);
  int64_t heads = 0;
  for (int64_t h : heads_per_layer) heads += h;
  out << fmt::format("wrote {} ({} KB): {} examples, {} layers, {} heads{}\n", path.string(), page.size() / 1024,
                     examples.size(), heads_per_layer.size(), heads,
                     data["summary"].is_null() ? " (no analysis.json: run attnlab analyze for the head summary)" : "");
  return 0;
}

// The page. Everything it needs is inline; it sets #status to "rendered N cells" after
// drawing an N-cell map, which the headless-browser test reads back from the DOM.
const char* const kPage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>attnlab viz</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 1em 2em; color: #222; background: #fff; }
  h1 { font-size: 1.3em; margin-bottom: 0.2em; }
  #meta, #note, #legend, #status { color: #555; font-size: 0.9em; }
  #controls { margin: 0.8em 0; }
  .layer { margin: 0.2em 0; font-family: monospace; }
  .layer span { display: inline-block; width: 5.5em; }
  button.head { font-family: monospace; margin: 1px; padding: 2px 6px; border: 1px solid #999; background: #f4f4f4; cursor: pointer; }
  button.head.active { background: #3b528b; color: #fff; border-color: #3b528b; }
  button.head.role { border-color: #d4a017; border-width: 2px; }
  #view { position: relative; display: inline-block; margin-top: 0.5em; }
  #tip { font-family: monospace; min-height: 1.3em; margin: 0.3em 0; }
  table { border-collapse: collapse; font-size: 0.85em; margin-top: 1em; }
  td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
  tr.active td { background: #fdf3c4; }
  tbody tr { cursor: pointer; }
</style>
</head>
<body>
<h1 id="title">attnlab viz</h1>
<div id="meta"></div>
<div id="controls">
  <label>example <select id="example"></select></label>
  <div id="heads"></div>
</div>
<div id="note"></div>
<div id="tip">hover over the map for weights</div>
<div id="view"><canvas id="map" width="10" height="10"></canvas></div>
<div id="legend"></div>
<p id="status">not rendered (JavaScript is off?)</p>
<div id="summary"></div>
<script type="application/json" id="data">@DATA@</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const state = { ex: 0, layer: 0, head: 0 };
const el = (id) => document.getElementById(id);
const cache = new Map();

// 16-bit little-endian weights, base64 (see viz.cpp).
function decode(b64, n) {
  const s = atob(b64), w = new Float32Array(n * n);
  for (let i = 0; i < n * n; i++) w[i] = (s.charCodeAt(2 * i) | (s.charCodeAt(2 * i + 1) << 8)) / 65535;
  return w;
}
function weights(e, l, h) {
  const key = e + "/" + l + "/" + h;
  if (!cache.has(key)) cache.set(key, decode(D.examples[e].maps[l][h], D.examples[e].tokens.length));
  return cache.get(key);
}
function viridis(t) {
  t = Math.min(1, Math.max(0, t)) * 8;
  const i = Math.min(Math.floor(t), 7), f = t - i, a = D.viridis[i], b = D.viridis[i + 1];
  return "rgb(" + [0, 1, 2].map((k) => Math.round(a[k] + f * (b[k] - a[k]))).join(",") + ")";
}
function summaryOf(l, h) {
  if (!D.summary) return null;
  return D.summary.heads.find((r) => r.layer === l && r.head === h) || null;
}
const fmt = (v) => (v === null || v === undefined ? "-" : typeof v === "number" ? v.toFixed(3) : String(v));

let geometry = null;
function draw() {
  const ex = D.examples[state.ex], toks = ex.tokens, n = toks.length;
  const w = weights(state.ex, state.layer, state.head);
  let max = 0;
  for (const v of w) max = Math.max(max, v);
  const cell = Math.max(5, Math.min(28, Math.floor(640 / n)));
  const longest = Math.min(12, Math.max(...toks.map((t) => t.length)));
  const margin = 10 + 7 * longest;
  const canvas = el("map"), ctx = canvas.getContext("2d");
  canvas.width = margin + n * cell + 10;
  canvas.height = margin + n * cell + 10;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  let cells = 0;
  for (let q = 0; q < n; q++)
    for (let k = 0; k < n; k++) {
      ctx.fillStyle = viridis(max > 0 ? w[q * n + k] / max : 0);
      ctx.fillRect(margin + k * cell, margin + q * cell, cell, cell);
      cells++;
    }
  if (cell >= 7) {
    const size = Math.min(12, cell - 1);
    ctx.font = size + "px monospace";
    ctx.fillStyle = "#222";
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    for (let q = 0; q < n; q++) ctx.fillText(toks[q].slice(0, 12), margin - 4, margin + q * cell + cell / 2);
    for (let k = 0; k < n; k++) {
      ctx.save();
      ctx.translate(margin + k * cell + cell / 2, margin - 4);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left";
      ctx.fillText(toks[k].slice(0, 12), 0, 0);
      ctx.restore();
    }
  }
  geometry = { margin, cell, n, w, toks };
  el("note").textContent = ex.note + " (" + n + " tokens; queries down, keys across)";
  el("legend").textContent = "colour: viridis from 0 (dark) to this map's maximum " + max.toFixed(4) + " (yellow)";
  for (const b of document.querySelectorAll("button.head"))
    b.classList.toggle("active", +b.dataset.layer === state.layer && +b.dataset.head === state.head);
  for (const r of document.querySelectorAll("tbody tr"))
    r.classList.toggle("active", +r.dataset.layer === state.layer && +r.dataset.head === state.head);
  const s = summaryOf(state.layer, state.head);
  el("tip").textContent = "layer " + state.layer + " head " + state.head +
    (s ? ": role " + s.role + ", confidence " + fmt(s.confidence) + ", importance " + fmt(s.importance) +
         ", relevance " + fmt(s.relevance) : "");
  const status = el("status");
  status.textContent = "rendered " + cells + " cells";
  status.dataset.cells = cells;
}

function hover(ev) {
  if (!geometry) return;
  const g = geometry, r = el("map").getBoundingClientRect();
  const k = Math.floor((ev.clientX - r.left - g.margin) / g.cell), q = Math.floor((ev.clientY - r.top - g.margin) / g.cell);
  if (q < 0 || k < 0 || q >= g.n || k >= g.n) return;
  el("tip").textContent = "layer " + state.layer + " head " + state.head + ": query " + q + " \u201c" + g.toks[q] +
    "\u201d \u2192 key " + k + " \u201c" + g.toks[k] + "\u201d: weight " + g.w[q * g.n + k].toFixed(4);
}

function select(l, h) {
  state.layer = l;
  state.head = h;
  draw();
}

function build() {
  document.title = "attnlab viz: " + D.title;
  el("title").textContent = "attention maps: " + D.title;
  el("meta").textContent = "task " + D.run.task + ", attention " + D.run.attention + ", checkpoint step " + D.run.step +
    (D.run.causal ? ", causal" : "") + "; " + D.layers.length + " layers, " + D.examples.length + " examples";
  const sel = el("example");
  D.examples.forEach((e, i) => {
    const o = document.createElement("option");
    o.value = i;
    o.textContent = i + ": " + e.note;
    sel.appendChild(o);
  });
  sel.addEventListener("change", () => { state.ex = +sel.value; draw(); });
  const heads = el("heads");
  D.layers.forEach((count, l) => {
    const row = document.createElement("div");
    row.className = "layer";
    const label = document.createElement("span");
    label.textContent = "layer " + l;
    row.appendChild(label);
    for (let h = 0; h < count; h++) {
      const b = document.createElement("button");
      b.className = "head";
      b.dataset.layer = l;
      b.dataset.head = h;
      b.textContent = "h" + h;
      const s = summaryOf(l, h);
      if (s) {
        b.title = s.role + ", confidence " + fmt(s.confidence);
        if (s.role !== "-") b.classList.add("role");
      }
      b.addEventListener("click", () => select(l, h));
      row.appendChild(b);
    }
    heads.appendChild(row);
  });
  el("map").addEventListener("mousemove", hover);
  if (D.summary) {
    const t = document.createElement("table");
    t.innerHTML = "<thead><tr><th>layer</th><th>head</th><th>role</th><th>confidence</th><th>top offset (share)</th>" +
      "<th>importance</th><th>relevance</th></tr></thead><tbody></tbody>";
    for (const s of D.summary.heads) {
      const r = document.createElement("tr");
      r.dataset.layer = s.layer;
      r.dataset.head = s.head;
      for (const v of [s.layer, s.head, s.role, fmt(s.confidence), (s.offset > 0 ? "+" : "") + s.offset + " (" + fmt(s.offset_share) + ")",
                       fmt(s.importance), fmt(s.relevance)]) {
        const c = document.createElement("td");
        c.textContent = v;
        r.appendChild(c);
      }
      r.addEventListener("click", () => select(s.layer, s.head));
      t.tBodies[0].appendChild(r);
    }
    const caption = document.createElement("p");
    caption.textContent = "Head summary from analysis.json (" + D.summary.examples + " examples; importance " +
      D.summary.importance + "; relevance " + D.summary.relevance + "). Click a row to show that head.";
    el("summary").append(caption, t);
  }
  draw();
}
build();
</script>
</body>
</html>
)PAGE";

}  // namespace

int run_viz(const VizOptions& o, std::ostream& out, std::ostream& err) {
  try {
    return viz(o, out);
  } catch (...) {
    return exit_status(nullptr, "viz", {o.run_dir.string()}, out, err);
  }
}

void add_viz_command(CLI::App& app, int& status) {
  auto o = std::make_shared<VizOptions>();
  auto* cmd = app.add_subcommand("viz", "write a self-contained HTML page to browse a run's attention maps (docs/cli.md)");
  cmd->add_option("run_dir", o->run_dir, "run directory")->required();
  cmd->add_option("--out", o->out, "HTML file (default RUN_DIR/viz.html)");
  cmd->add_option("--examples", o->examples, "validation examples on the page (1..8, default 3)")->check(CLI::Range(1, 8));
  cmd->add_option("--max-tokens", o->max_tokens, "longest example shown (2..256, default 64)")->check(CLI::Range(2, 256));
  cmd->callback([o, &status] { status = run_viz(*o, std::cout, std::cerr); });
}

}  // namespace attnlab::cli
