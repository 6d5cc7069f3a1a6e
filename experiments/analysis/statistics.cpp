// Attention statistics, roles, tables and heatmaps (see statistics.hpp).
#include "experiments/analysis/statistics.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "experiments/data/listops.hpp"
#include "experiments/plot/png.hpp"

namespace attnlab::analysis {

size_t AttentionStats::running_bytes() const {
  size_t bytes = sizeof(*this) + structural_offsets.size() * 48;
  for (const LayerStats& l : layers)
    for (const HeadStats& h : l.heads) bytes += sizeof(h) + h.argmax_offsets.size() * 48 + h.class_mass.size() * 8;
  return bytes;
}

std::vector<int64_t> listops_enclosing_operator(const std::vector<int64_t>& tokens) {
  std::vector<int64_t> out(tokens.size(), -1), open;  // open: positions of unclosed operators
  for (size_t n = 0; n < tokens.size(); ++n) {
    const int64_t t = tokens[n];
    if (t >= data::kListOpsMin && t <= data::kListOpsSum) {
      out[n] = open.empty() ? -1 : open.back();
      open.push_back(int64_t(n));
    } else if (t == data::kListOpsEnd) {
      if (open.empty()) fail<ValueError>("listops_enclosing_operator: unbalanced ] at position {}", n);
      out[n] = open.back();
      open.pop_back();
    } else if (t >= data::kListOpsDigit0 && t < data::kListOpsDigit0 + 10) {
      out[n] = open.empty() ? -1 : open.back();
    }
  }
  return out;
}

int64_t recall_answer_position(const int64_t* tokens, int64_t query, int64_t keys) {
  const int64_t q = tokens[query];
  if (q < 0 || q >= keys) return -1;
  for (int64_t m = query - 2; m >= 0; --m)
    if (tokens[m] == q) return m + 1;
  return -1;
}

AttentionRecorder::AttentionRecorder(const Probe& probe, StatsConfig config) : probe_(probe), config_(std::move(config)) {
  if (config_.keep_examples < 0) fail<ValueError>("AttentionRecorder: keep_examples must be >= 0, got {}", config_.keep_examples);
  if (config_.recall_keys < 0) fail<ValueError>("AttentionRecorder: recall_keys must be >= 0, got {}", config_.recall_keys);
  if (!config_.token_class.empty() && config_.class_names.empty())
    fail<ValueError>("AttentionRecorder: token_class given without class_names");
  stats_.layers.resize(probe_.blocks.size());
}

void AttentionRecorder::add(const data::Batch& batch) {
  const bool need_tokens =
      !config_.token_class.empty() || config_.listops_structure || config_.rare_tokens || config_.recall_keys > 0;
  Tensor tokens = probe_.axis_tokens ? probe_.axis_tokens(batch) : Tensor();
  if (need_tokens && !tokens.defined())
    fail<ValueError>("AttentionRecorder: token statistics asked for, but the model's inputs are not tokens");
  FreezeScope freeze(*probe_.model);
  NoGradGuard no_grad;
  ObserverScope scope(probe_, [&](int64_t l, const nn::AttentionResult& r) {
    if (!r.attention.defined() || r.attention.numel() == 0)
      fail<ValueError>("AttentionRecorder: layer {} ({}) returns no attention probabilities", l,
                       probe_.blocks[l]->attn->spec());
    add_maps(l, r.attention, tokens);
  });
  probe_.forward(batch);
  end_batch(tokens, batch.inputs.size(0));
}

void AttentionRecorder::add_maps(int64_t layer, const Tensor& p, const Tensor& tokens) {
  if (layer < 0) fail<IndexError>("AttentionRecorder: layer must be >= 0, got {}", layer);
  if (layer >= int64_t(stats_.layers.size())) stats_.layers.resize(size_t(layer) + 1);
  if (p.dim() != 4 || p.size(2) != p.size(3))
    fail<ShapeError>("AttentionRecorder: self-attention maps must be (B, h, N, N), got {}", to_string(p.shape()));
  const int64_t B = p.size(0), H = p.size(1), N = p.size(2);
  if (tokens.defined() && (tokens.dim() != 2 || tokens.size(0) != B || tokens.size(1) != N))
    fail<ShapeError>("AttentionRecorder: tokens must be ({}, {}) like the maps, got {}", B, N, to_string(tokens.shape()));
  const bool need_tokens =
      !config_.token_class.empty() || config_.listops_structure || config_.rare_tokens || config_.recall_keys > 0;
  if (need_tokens && !tokens.defined())
    fail<ValueError>("AttentionRecorder: token statistics asked for, but no tokens were given with the maps");
  LayerStats& ls = stats_.layers[layer];
  if (ls.heads.empty()) ls.heads.resize(H);
  if (int64_t(ls.heads.size()) != H)
    fail<ShapeError>("AttentionRecorder: layer {} had {} heads, now {}", layer, ls.heads.size(), H);
  const size_t classes = config_.class_names.size();
  for (HeadStats& h : ls.heads) h.class_mass.resize(classes, 0.0);

  const std::vector<double> P = to(p.detach(), kFloat64).to_vector<double>();  // (B, h, N, N)
  const std::vector<int64_t> T = tokens.defined() ? tokens.to_vector<int64_t>() : std::vector<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* tok = T.empty() ? nullptr : T.data() + b * N;
    auto is_pad = [&](int64_t m) { return tok && probe_.pad_id >= 0 && tok[m] == probe_.pad_id; };
    std::vector<int64_t> enclosing;
    if (config_.listops_structure) enclosing = listops_enclosing_operator(std::vector<int64_t>(tok, tok + N));
    // Rare-token sets per query: positions whose token has the lowest frequency among visible ones.
    std::map<int64_t, int64_t> seq_count;
    if (config_.rare_tokens && config_.token_frequency.empty())
      for (int64_t m = 0; m < N; ++m)
        if (!is_pad(m) && tok[m] >= 0) ++seq_count[tok[m]];
    auto frequency = [&](int64_t id) {
      if (config_.token_frequency.empty()) return double(seq_count[id]);
      if (id < 0 || id >= int64_t(config_.token_frequency.size()))
        fail<ValueError>("AttentionRecorder: token id {} outside token_frequency (size {})", id, config_.token_frequency.size());
      return config_.token_frequency[id];
    };
    for (int64_t n = 0; n < N; ++n) {
      if (is_pad(n)) continue;
      std::vector<int64_t> keys;
      for (int64_t m = 0; m < (probe_.causal ? n + 1 : N); ++m)
        if (!is_pad(m)) keys.push_back(m);
      if (keys.size() < 2) continue;  // no choice to measure
      std::vector<int64_t> rarest;
      if (config_.rare_tokens) {
        double fmin = INFINITY;
        std::vector<int64_t> ids;
        for (int64_t m : keys)
          if (tok[m] >= 0) fmin = std::min(fmin, frequency(tok[m])), ids.push_back(tok[m]);
        std::sort(ids.begin(), ids.end());
        if (std::unique(ids.begin(), ids.end()) - ids.begin() >= 2)
          for (int64_t m : keys)
            if (tok[m] >= 0 && frequency(tok[m]) == fmin) rarest.push_back(m);
      }
      for (int64_t i = 0; i < H; ++i) {
        HeadStats& hs = ls.heads[i];
        const double* row = P.data() + ((b * H + i) * N + n) * N;
        int64_t best = keys[0];
        for (int64_t m : keys)
          if (row[m] > row[best]) best = m;
        hs.confidence_sum += row[best];
        ++hs.queries;
        ++hs.argmax_offsets[best - n];
        if (classes)
          for (int64_t m : keys) {
            if (tok[m] < 0) continue;  // CLS has no class
            if (tok[m] >= int64_t(config_.token_class.size()))
              fail<ValueError>("AttentionRecorder: token id {} outside token_class (size {})", tok[m], config_.token_class.size());
            hs.class_mass[size_t(config_.token_class[tok[m]])] += row[m];
          }
        if (!enclosing.empty() && enclosing[n] >= 0 && best == enclosing[n]) ++hs.structural_hits;
        for (int64_t m : rarest) hs.rare_mass += row[m];
      }
      if (layer == 0) {  // data-level sums, once per query
        if (!enclosing.empty() && enclosing[n] >= 0) ++stats_.structural_queries, ++stats_.structural_offsets[enclosing[n] - n];
        if (!rarest.empty()) ++stats_.rare_queries, stats_.rare_uniform += double(rarest.size()) / double(keys.size());
      }
    }
    if (config_.recall_keys > 0) add_retrieval(ls, layer, P.data() + b * H * N * N, tok, H, N);
    const int64_t kept_index = stats_.examples + b;
    if (kept_index < config_.keep_examples) {
      ls.kept.push_back(clone(select(p.detach(), 0, b)));  // (h, N, N)
      if (layer == 0) stats_.kept_tokens.push_back(tok ? std::vector<int64_t>(tok, tok + N) : std::vector<int64_t>());
    }
  }
}

void AttentionRecorder::add_retrieval(LayerStats& ls, int64_t layer, const double* p, const int64_t* tok, int64_t H,
                                      int64_t N) {
  // The query is the last real token; the answer, the value after its key among the pairs.
  int64_t query = N - 1;
  while (query >= 0 && (tok[query] < 0 || (probe_.pad_id >= 0 && tok[query] == probe_.pad_id))) --query;
  if (query < 0) return;
  const int64_t answer = recall_answer_position(tok, query, config_.recall_keys);
  if (answer < 0) return;
  for (int64_t i = 0; i < H; ++i) ls.heads[i].retrieval_mass += p[(i * N + query) * N + answer];  // p: (h, N, N)
  if (layer == 0) {
    int64_t keys = 0;
    for (int64_t m = 0; m < (probe_.causal ? query + 1 : N); ++m) keys += !(probe_.pad_id >= 0 && tok[m] == probe_.pad_id);
    ++stats_.retrieval_queries;
    stats_.retrieval_uniform += 1.0 / double(keys);
  }
}

void AttentionRecorder::end_batch(const Tensor&, int64_t batch_size) { stats_.examples += batch_size; }

// ---------------------------------------------------------------------------- roles

HeadMatrix confidence(const AttentionStats& s) {
  HeadMatrix out;
  for (const LayerStats& l : s.layers) {
    out.emplace_back();
    for (const HeadStats& h : l.heads) out.back().push_back(h.queries ? h.confidence_sum / h.queries : NAN);
  }
  return out;
}

double structural_baseline(const AttentionStats& s) {
  if (s.structural_queries == 0) return NAN;
  int64_t best = 0;
  for (auto& [off, c] : s.structural_offsets) best = std::max(best, c);
  return double(best) / double(s.structural_queries);
}

double rare_uniform_baseline(const AttentionStats& s) { return s.rare_queries ? s.rare_uniform / s.rare_queries : NAN; }

double retrieval_uniform_baseline(const AttentionStats& s) {
  return s.retrieval_queries ? s.retrieval_uniform / double(s.retrieval_queries) : NAN;
}

std::string HeadRole::label() const {
  std::string out;
  auto add = [&](const std::string& r) { out += (out.empty() ? "" : "+") + r; };
  if (positional) add(fmt::format("positional({:+d})", offset));
  if (is_structural) add("structural");
  if (is_rare) add("rare");
  if (is_retrieval) add("retrieval");
  if (is_previous_token) add("previous_token");
  if (is_induction) add("induction");
  return out.empty() ? "-" : out;
}

std::vector<std::vector<HeadRole>> head_roles(const AttentionStats& s, const RoleThresholds& t) {
  const double base = structural_baseline(s), uniform = rare_uniform_baseline(s);
  const double retrieval_uniform = retrieval_uniform_baseline(s);
  std::vector<std::vector<HeadRole>> out;
  for (const LayerStats& l : s.layers) {
    out.emplace_back();
    for (const HeadStats& h : l.heads) {
      HeadRole r;
      r.confidence = h.queries ? h.confidence_sum / h.queries : NAN;
      int64_t best = 0;
      for (auto& [off, c] : h.argmax_offsets)
        if (c > best) best = c, r.offset = off;
      r.offset_share = h.queries ? double(best) / h.queries : 0;
      r.positional = h.queries > 0 && r.offset_share >= t.positional;
      if (s.structural_queries > 0) {
        r.structural = double(h.structural_hits) / s.structural_queries;
        r.is_structural = r.structural >= base + t.structural_margin;
      }
      if (s.rare_queries > 0) {
        r.rare_mass = h.rare_mass / s.rare_queries;
        r.is_rare = r.rare_mass >= t.rare_mass && r.rare_mass >= uniform + t.rare_margin;
      }
      if (s.retrieval_queries > 0) {
        r.retrieval = h.retrieval_mass / double(s.retrieval_queries);
        r.is_retrieval = r.retrieval >= t.retrieval_mass && r.retrieval >= retrieval_uniform + t.retrieval_margin;
      }
      const CircuitStats& c = s.circuits;
      const size_t l = out.size() - 1, i = out.back().size();
      if (c.examples > 0 && l < c.previous_token.size() && i < c.previous_token[l].size()) {
        r.previous_token = c.previous_token[l][i];
        r.is_previous_token = r.previous_token >= t.previous_token && r.previous_token >= c.previous_uniform + t.previous_margin;
        r.induction = c.induction[l][i];
        r.is_induction = r.induction >= t.induction && r.induction >= c.induction_uniform + t.induction_margin;
      }
      out.back().push_back(r);
    }
  }
  return out;
}

std::string role_table(const AttentionStats& s, const HeadMatrix* importance, const HeadMatrix* relevance,
                       const RoleThresholds& t) {
  auto roles = head_roles(s, t);
  auto num = [](double v) { return std::isnan(v) ? std::string("-") : fmt::format("{:.3f}", v); };
  std::string out = fmt::format("{} examples. Positional: >= {:.0f}% of argmax at one offset.", s.examples, 100 * t.positional);
  if (s.structural_queries)
    out += fmt::format(" Structural: enclosing-operator share >= baseline {:.3f} + {:.2f}.", structural_baseline(s),
                       t.structural_margin);
  if (s.rare_queries)
    out += fmt::format(" Rare: mass on rarest >= {:.2f} and >= uniform {:.3f} + {:.2f}.", t.rare_mass,
                       rare_uniform_baseline(s), t.rare_margin);
  if (s.retrieval_queries)
    out += fmt::format(" Retrieval: weight from the query on the answer >= {:.2f} and >= uniform {:.3f} + {:.2f}.",
                       t.retrieval_mass, retrieval_uniform_baseline(s), t.retrieval_margin);
  const bool circuits = s.circuits.examples > 0;
  if (circuits)
    out += fmt::format(" Previous-token and induction: mean weight on a repeated random sequence ({} sequences of 2 x {} "
                       "tokens) >= {:.2f} and >= uniform {:.3f} + {:.2f} (previous token), {:.3f} + {:.2f} (induction).",
                       s.circuits.examples, s.circuits.half, t.previous_token, s.circuits.previous_uniform,
                       t.previous_margin, s.circuits.induction_uniform, t.induction_margin);
  out += "\n";
  for (size_t l = 0; l < roles.size(); ++l) {
    out += fmt::format("\n### layer {}\n\n| head | confidence | top offset (share) | structural | rare mass | retrieval |", l);
    if (circuits) out += " previous token | induction |";
    if (importance) out += " importance |";
    if (relevance) out += " relevance |";
    out += " role |\n|---|---|---|---|---|---|";
    if (circuits) out += "---|---|";
    if (importance) out += "---|";
    if (relevance) out += "---|";
    out += "---|\n";
    for (size_t i = 0; i < roles[l].size(); ++i) {
      const HeadRole& r = roles[l][i];
      out += fmt::format("| {} | {} | {:+d} ({:.3f}) | {} | {} | {} |", i, num(r.confidence), r.offset, r.offset_share,
                         num(r.structural), num(r.rare_mass), num(r.retrieval));
      if (circuits) out += fmt::format(" {} | {} |", num(r.previous_token), num(r.induction));
      auto at = [&](const HeadMatrix* m) { return l < m->size() && i < (*m)[l].size() ? (*m)[l][i] : NAN; };
      if (importance) out += fmt::format(" {} |", num(at(importance)));
      if (relevance) out += fmt::format(" {} |", num(at(relevance)));
      out += fmt::format(" {} |\n", r.label());
    }
  }
  return out;
}

// ---------------------------------------------------------------------------- heatmaps

void save_head_heatmap(const std::string& path, const std::string& title, const HeadMatrix& values) {
  plot::Heatmap h;
  h.title = title;
  h.rows = int(values.size());
  for (const auto& row : values) h.cols = std::max(h.cols, int(row.size()));
  for (const auto& row : values)
    for (int i = 0; i < h.cols; ++i) h.values.push_back(i < int(row.size()) ? row[i] : NAN);
  h.row_axis = "layer";
  h.col_axis = "head";
  plot::save_heatmap(path, h);
}

std::vector<std::string> save_attention_maps(const std::string& dir, const Tensor& attention,
                                             const std::vector<std::string>& query_labels,
                                             const std::vector<std::string>& key_labels) {
  if (attention.dim() != 4 || attention.numel() == 0)
    fail<ShapeError>("save_attention_maps: attention must be a non-empty (B, h, N, M), got {}", to_string(attention.shape()));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail<FileError>("save_attention_maps: cannot create {}: {}", dir, ec.message());
  const int64_t B = attention.size(0), H = attention.size(1), N = attention.size(2), M = attention.size(3);
  const std::vector<double> P = to(attention.detach(), kFloat64).to_vector<double>();
  std::vector<std::string> paths;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < H; ++i) {
      plot::Heatmap h;
      h.title = fmt::format("example {} head {}", b, i);
      h.rows = int(N), h.cols = int(M);
      h.values.assign(P.begin() + (b * H + i) * N * M, P.begin() + (b * H + i + 1) * N * M);
      h.row_labels = query_labels, h.col_labels = key_labels;
      h.row_axis = "query", h.col_axis = "key";
      h.vmin = 0;  // probabilities: the scale starts at 0, so maps compare by colour
      const std::string path = (std::filesystem::path(dir) / fmt::format("attention_b{}_h{}.png", b, i)).string();
      plot::save_heatmap(path, h);
      paths.push_back(path);
    }
  return paths;
}

}  // namespace attnlab::analysis
