// `attnlab variants`: the attention registry as a reader sees it. Without arguments, every
// registered variant with its summary, what it supports (nn::Capabilities) and each option's
// type, default and doc (from its VariantSchema); with a NAME, that variant only; with `--params
// SPEC --d-model D`, the layer built from SPEC with every parameter and buffer, its shape and
// dtype, and totals; with `--markdown`, the variant table of README.md and docs/attention.md
// (`--write FILE` replaces the block between FILE's `<!-- variants:begin -->` and
// `<!-- variants:end -->` lines). Nothing here knows a particular variant: it goes through
// nn::variants() and make_attention only.
#include <algorithm>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "experiments/cli/commands.hpp"
#include "experiments/runner/marked_block.hpp"
#include "nn/attention/registry.hpp"
#include "tensor/io.hpp"

namespace attnlab::cli {
namespace {

const char* type_name(nn::OptionType t) {
  switch (t) {
    case nn::OptionType::Int: return "int";
    case nn::OptionType::Double: return "double";
    case nn::OptionType::Bool: return "bool";
    case nn::OptionType::Choice: return "choice";
    case nn::OptionType::List: return "list";
    case nn::OptionType::IntList: return "int list";
  }
  return "?";
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : sep) + i;
  return s;
}

// "cross, causal, ..." of the features with `support`; "causal (only)" for a causal-only variant.
std::string features_with(const nn::Capabilities& c, nn::Support support) {
  std::vector<std::string> names;
  for (const auto& [name, s] : c.features())
    if (s == support) names.push_back(name == "causal" && c.causal_only ? "causal (only)" : name);
  return join(names, ", ");
}

void list_variant(const nn::VariantSchema& s, std::ostream& out) {
  out << s.name << "  " << s.summary << "\n";
  if (!s.time_cost.empty()) out << "  cost: time " << s.time_cost << "; memory " << s.memory_cost << "\n";
  const nn::Capabilities& c = s.capabilities;
  for (nn::Support support : {nn::Support::yes, nn::Support::no, nn::Support::probe}) {
    const std::string names = features_with(c, support);
    const char* label = support == nn::Support::yes ? "supports" : support == nn::Support::no ? "lacks" : "probed";
    if (!names.empty()) out << "  " << label << ": " << names << "\n";
  }
  if (!c.isolates_masked) out << "  masked, future and other documents' inputs take part in its output\n";
  size_t width = 6;
  for (const auto& o : s.options) width = std::max(width, o.name.size());
  for (const auto& o : s.options) {
    // An empty default is computed from other values; the doc says from what.
    std::string doc = o.doc;
    if (o.type == nn::OptionType::Choice && !o.choices.empty()) doc += " (one of: " + join(o.choices, ", ") + ")";
    if (o.type == nn::OptionType::List && !o.choices.empty()) doc += " (+-joined items of: " + join(o.choices, ", ") + ")";
    out << fmt::format("  {:<{}}  {:<8}  {:<10}  {}\n", o.name, width, type_name(o.type),
                       o.default_value.empty() ? "computed" : o.default_value, doc);
  }
}

// One table cell: "yes", "-" or "by options"; causal "only" for a causal-only variant.
std::string cell(nn::Support s, bool only = false) {
  if (s == nn::Support::yes) return only ? "only" : "yes";
  return s == nn::Support::no ? "-" : "by options";
}

// The Markdown table of every registered variant: its summary and capabilities.
std::string variants_markdown() {
  std::string md =
      "| variant | what it is | cross | causal | key mask | query mask | pruning | decoding | packed rows |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& v : nn::variants()) {
    const nn::VariantSchema& s = v.schema;
    const nn::Capabilities& c = s.capabilities;
    // lsh's masks hide keys from attention but not from its hashing
    const std::string leaky = c.isolates_masked ? "" : " (not isolated)";
    std::string summary = s.summary;
    for (size_t at = 0; (at = summary.find('|', at)) != std::string::npos; at += 2) summary.replace(at, 1, "\\|");
    md += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |\n", s.name, summary, cell(c.cross),
                      cell(c.causal, c.causal_only) + leaky, cell(c.key_mask) + leaky, cell(c.query_mask) + leaky,
                      cell(c.pruning), cell(c.decoding), cell(c.segments) + leaky);
  }
  return md;
}

int list_params(const std::string& spec, int64_t d_model, std::ostream& out) {
  auto attn = nn::make_attention(spec, d_model);
  const TensorMap saved = attn->state_dict();  // to tell persistent buffers from derived ones
  const nn::NamedTensors params = attn->named_parameters(), buffers = attn->named_buffers();
  size_t width = 4;
  for (const auto* list : {&params, &buffers})
    for (const auto& [name, t] : *list) width = std::max(width, name.size());

  out << attn->spec() << "  d_model=" << d_model << "\n";
  int64_t total = 0, trainable = 0;
  out << "parameters:\n";
  if (params.empty()) out << "  (none)\n";
  for (const auto& [name, t] : params) {
    total += t.numel();
    if (t.requires_grad()) trainable += t.numel();
    out << fmt::format("  {:<{}}  {:<16}  {}{}\n", name, width, to_string(t.shape()), dtype_name(t.dtype()),
                       t.requires_grad() ? "" : "  (frozen)");
  }
  int64_t buffer_elems = 0;
  out << "buffers:\n";
  if (buffers.empty()) out << "  (none)\n";
  for (const auto& [name, t] : buffers) {
    buffer_elems += t.numel();
    out << fmt::format("  {:<{}}  {:<16}  {}{}\n", name, width, to_string(t.shape()), dtype_name(t.dtype()),
                       saved.count(name) ? "" : "  (not saved)");
  }
  out << fmt::format("total: {} parameter tensors, {} elements ({} trainable); {} buffers, {} elements\n",
                     params.size(), total, trainable, buffers.size(), buffer_elems);
  return 0;
}

CommandBody define_variants(CLI::App& cmd) {
  struct Args {
    std::string name, params;
    int64_t d_model = 0;
    bool markdown = false;
    std::vector<std::string> write;
  };
  auto a = std::make_shared<Args>();
  auto* name = cmd.add_option("NAME", a->name, "list only this variant");
  auto* params = cmd.add_option("--params", a->params,
                                "build the layer SPEC, e.g. 'mha(heads=4, gate=hard_concrete)' (quote it for the shell), "
                                "and list its parameters and buffers");
  auto* d_model = cmd.add_option("--d-model", a->d_model, "the layer's width D (with --params)")
                      ->check(int_range(1, int64_t(1) << 40));
  auto* markdown = cmd.add_flag("--markdown", a->markdown,
                                "print the variant table of README.md and docs/attention.md (summary and capabilities)");
  auto* write = cmd.add_option("--write", a->write,
                               "with --markdown: replace the table between FILE's lines <!-- variants:begin --> and "
                               "<!-- variants:end --> (repeatable)")
                    ->type_name("FILE");
  params->needs(d_model)->excludes(name);
  d_model->needs(params);
  markdown->excludes(name)->excludes(params);
  write->needs(markdown);
  cmd.footer(
      "Without --params: every registered attention variant (or only NAME) with its options,\n"
      "their types, defaults and meaning, and what it supports. With --params SPEC --d-model D: the\n"
      "layer SPEC builds for width D, every parameter and buffer with its shape and dtype, and\n"
      "totals. With --markdown: the table of variants and capabilities that README.md and\n"
      "docs/attention.md hold, printed or (--write FILE) written into FILE's variants block.");
  return [a](std::ostream& out, std::ostream&) {
    if (!a->params.empty()) return list_params(a->params, a->d_model, out);
    if (a->markdown) {
      const std::string table = variants_markdown();
      if (a->write.empty()) out << table;
      // Every file's block is found before any is written, so a file without markers changes nothing.
      std::vector<std::string> texts;
      for (const std::string& f : a->write)
        texts.push_back(runner::replace_marked_block(read_text(f), "variants", table, f, "the variant table"));
      for (size_t i = 0; i < a->write.size(); ++i) {
        write_text_atomic(a->write[i], texts[i]);
        out << "wrote the variant table into " << a->write[i] << "\n";
      }
      return 0;
    }
    const auto& all = nn::variants();
    if (a->name.empty()) {
      for (size_t i = 0; i < all.size(); ++i) {
        if (i) out << "\n";
        list_variant(all[i].schema, out);
      }
      return 0;
    }
    for (const auto& v : all)
      if (v.schema.name == a->name) {
        list_variant(v.schema, out);
        return 0;
      }
    std::vector<std::string> names;
    for (const auto& v : all) names.push_back(v.schema.name);
    fail<ValueError>("unknown variant {} (known: {})", a->name, join(names, ", "));
  };
}

}  // namespace

const Command kVariantsCommand = {
    "variants",
    "list the attention variants and their options; --params SPEC --d-model D lists a layer's parameters and buffers",
    define_variants};

}  // namespace attnlab::cli
